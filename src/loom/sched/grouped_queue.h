#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "loom/core/job.h"
#include "loom/sched/pending_reason.h"
#include "loom/sched/queue_policy.h"

namespace loom {

// Pending jobs grouped by (class, project, resource shape, node selector), each
// group in arrival order, visited in one merged order per pass. Why: within a
// pass capacity only shrinks, so once a job of some shape fails to fit, every
// later job of the same shape fails too. Grouping lets a policy skip the rest
// of a group in O(1) instead of rescanning a long queue on every pass; the
// cost of a pass is then about the number of jobs started plus the number of
// groups, not the queue length.
//
// The merged order is (group class ascending, group rank ascending, submit
// time, job id). Policies choose the class (e.g. -priority, or the LAS queue)
// and the per-pass rank (e.g. fair-share usage).
class GroupedQueue {
 public:
  struct Entry {
    absl::Time submit;
    JobId id;
    absl::Duration time_limit;
    friend bool operator<(const Entry& a, const Entry& b) {
      return std::tie(a.submit, a.id) < std::tie(b.submit, b.id);
    }
  };

  struct GroupKey {
    int cls = 0;
    int project = 0;
    JobShape shape;
    // The job's interned node selector (`SchedJob::selector`): jobs of one
    // shape but different selectors fit different nodes.
    int selector = 0;
    friend bool operator==(const GroupKey& a, const GroupKey& b) {
      return a.cls == b.cls && a.project == b.project &&
             a.shape.tasks == b.shape.tasks &&
             a.shape.gpus_per_task == b.shape.gpus_per_task &&
             a.shape.gpu_model == b.shape.gpu_model &&
             a.shape.cpus_milli_per_task == b.shape.cpus_milli_per_task &&
             a.shape.memory_bytes_per_task == b.shape.memory_bytes_per_task &&
             a.shape.one_task_per_node == b.shape.one_task_per_node &&
             a.selector == b.selector;
    }
    template <typename H>
    friend H AbslHashValue(H h, const GroupKey& k) {
      return H::combine(
          std::move(h), k.cls, k.project, k.shape.tasks, k.shape.gpus_per_task,
          k.shape.gpu_model, k.shape.cpus_milli_per_task,
          k.shape.memory_bytes_per_task, k.shape.one_task_per_node, k.selector);
    }
  };

  struct Group {
    GroupKey key;
    absl::btree_set<Entry> jobs;
    // The jobs with a time limit, shortest first: backfilling looks here
    // for jobs that end before a reservation without walking the group.
    absl::btree_set<std::tuple<absl::Duration, absl::Time, JobId>> by_limit;
    // Set by the policy when it skips the rest of the group in a pass: the
    // reason that applies to every job of the group it did not visit.
    PendingReason skipped_reason;
    uint64_t skipped_pass = 0;
  };

  // What the visitor did with a job.
  enum class Step {
    kStarted,    // the job started: remove it and go on
    kNext,       // it stays pending: go on with the next job of its group
    kSkipGroup,  // stays pending; skip the rest of its group in this pass
    kStop,       // end the pass
  };

  void Insert(const GroupKey& key, const SchedJob& job);
  void Erase(const GroupKey& key, const SchedJob& job);
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  // The group a job belongs to, or null.
  Group* Find(const GroupKey& key);
  const Group* Find(const GroupKey& key) const;

  // Visits jobs in merged order. `rank(group)` is evaluated once per group
  // per pass; `visit(entry, group)` returns what to do next.
  template <typename RankFn, typename VisitFn>
  void Visit(RankFn&& rank, VisitFn&& visit);

  // Visits the jobs of `group` whose time limit is at most `bound`, shortest
  // first. `visit(entry)` returns what to do next (kSkipGroup and kStop both
  // end the walk).
  template <typename VisitFn>
  void VisitByLimit(Group& group, absl::Duration bound, VisitFn&& visit);

 private:
  std::vector<Group> groups_;
  absl::flat_hash_map<GroupKey, int> index_;
  size_t size_ = 0;
};

template <typename RankFn, typename VisitFn>
void GroupedQueue::Visit(RankFn&& rank, VisitFn&& visit) {
  // (class, rank, submit, id, group): a heap over the groups' next jobs.
  using Head = std::tuple<int, double, absl::Time, JobId, int>;
  using Iter = absl::btree_set<Entry>::iterator;
  std::vector<Head> heap;
  heap.reserve(groups_.size());
  std::vector<double> ranks(groups_.size(), 0.0);
  std::vector<Iter> cursor(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].jobs.empty()) continue;
    ranks[g] = rank(groups_[g]);
    cursor[g] = groups_[g].jobs.begin();
    heap.emplace_back(groups_[g].key.cls, ranks[g], cursor[g]->submit,
                      cursor[g]->id, static_cast<int>(g));
  }
  auto greater = [](const Head& a, const Head& b) { return a > b; };
  std::make_heap(heap.begin(), heap.end(), greater);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), greater);
    const int g = std::get<4>(heap.back());
    heap.pop_back();
    Group& group = groups_[g];
    Iter& cur = cursor[g];
    // Visit this group's jobs while they come before every other group's.
    while (cur != group.jobs.end()) {
      if (!heap.empty()) {
        const Head mine(group.key.cls, ranks[g], cur->submit, cur->id, g);
        if (heap.front() < mine) break;
      }
      const Entry entry = *cur;
      const Step step = visit(entry, group);
      if (step == Step::kStarted) {
        group.by_limit.erase({entry.time_limit, entry.submit, entry.id});
        cur = group.jobs.erase(cur);
        --size_;
      } else if (step == Step::kNext) {
        ++cur;
      } else if (step == Step::kSkipGroup) {
        cur = group.jobs.end();
      } else {
        return;
      }
    }
    if (cur == group.jobs.end()) continue;
    heap.emplace_back(group.key.cls, ranks[g], cur->submit, cur->id, g);
    std::push_heap(heap.begin(), heap.end(), greater);
  }
}

template <typename VisitFn>
void GroupedQueue::VisitByLimit(Group& group, absl::Duration bound,
                                VisitFn&& visit) {
  for (auto it = group.by_limit.begin();
       it != group.by_limit.end() && std::get<0>(*it) <= bound;) {
    const Entry entry{std::get<1>(*it), std::get<2>(*it), std::get<0>(*it)};
    const Step step = visit(entry);
    if (step == Step::kStarted) {
      group.jobs.erase(entry);
      it = group.by_limit.erase(it);
      --size_;
    } else if (step == Step::kNext) {
      ++it;
    } else {
      return;
    }
  }
}

}  // namespace loom
