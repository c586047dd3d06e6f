// Node liveness (docs/fault-tolerance.md, "Detection"): nodes that fall
// silent are suspect (no new work) and probed, then down after the
// heartbeat timeout; and the fastest signal, the gang itself: when a task
// of a multi-node run fails while another node of the run has gone silent,
// that node's tasks are lost at once, and the run is requeued as one that
// lost a node, not failed, without waiting for the node's timeout.

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/common/units.h"
#include "loom/server/controller.h"

namespace loom {
namespace {

// A node whose heartbeats have lapsed is probed at most this often.
constexpr absl::Duration kProbeEvery = absl::Seconds(1);

constexpr const char* kRefusedText =
    "its agent refused a connection (not running)";

}  // namespace

void Controller::StepLiveness(absl::Time now,
                              std::vector<const JobRecord*>* dirty) {
  // A node not heard from since this server started is down once a whole
  // timeout has passed: its tasks were fenced by then.
  for (size_t n = 0; n < nodes_.size(); ++n) {
    Node& node = nodes_[n];
    if (node.state == Node::State::kUnknown) {
      if (now - created_ > options_.heartbeat_timeout &&
          !scheduler_->JobsOnNode(static_cast<int>(n)).empty()) {
        node.state = Node::State::kDown;
        node.reason =
            absl::StrCat("no agent registered within ",
                         absl::FormatDuration(options_.heartbeat_timeout),
                         " of this server's start");
        NodeLost(static_cast<int>(n), now, dirty);
      }
      continue;
    }
    if (node.state != Node::State::kUp) continue;
    const absl::Duration silent = now - node.last_heartbeat;
    if (silent > options_.heartbeat_timeout) {
      node.state = Node::State::kDown;
      node.suspect = false;
      node.reason =
          absl::StrCat("no heartbeat for ", FormatDurationShort(silent));
      if (node.probed_at > node.last_heartbeat) {
        absl::StrAppend(&node.reason, "; ",
                        node.probe == Node::Probe::kRefused ? kRefusedText
                        : node.probe == Node::Probe::kAnswered
                            ? "its agent answered a probe"
                            : "its agent did not answer a probe");
      }
      UpdateSchedulable(static_cast<int>(n));
      NodeLost(static_cast<int>(n), now, dirty);
      continue;
    }
    if (!node.suspect && silent > options_.suspect_after) {
      node.suspect = true;
      UpdateSchedulable(static_cast<int>(n));
    }
    // Suspect: ask the agent directly. Its answer is shown (`loom nodes`)
    // and lets a failing gang on the node go at once; the node itself
    // stays up until the timeout, so that an agent restarting under its
    // tasks, or paused, keeps them.
    if (node.suspect && !node.probing && now - node.probed_at >= kProbeEvery) {
      Probe(static_cast<int>(n), now);
    }
  }
  StepGangWatch(now, dirty);
}

void Controller::Probe(int n, absl::Time now) {
  Node& node = nodes_[n];
  if (node.probing || node.address.empty()) return;
  node.probing = true;
  node.probed_at = now;
  AgentAction a;
  a.kind = AgentAction::Kind::kProbe;
  a.node = cluster_->nodes[n].name;
  a.address = node.address;
  actions_.push_back(std::move(a));
}

void Controller::ProbeDelivered(const AgentAction& action,
                                const absl::Status& status, absl::Time now) {
  const int n = NodeIndex(action.node);
  if (n < 0) return;
  Node& node = nodes_[n];
  node.probing = false;
  node.probe = status.ok()                   ? Node::Probe::kAnswered
               : absl::IsUnavailable(status) ? Node::Probe::kRefused
                                             : Node::Probe::kNoAnswer;
  if (node.probe == Node::Probe::kAnswered) return;
  std::vector<const JobRecord*> dirty;
  StepGangWatch(now, &dirty);
  (void)Persist(dirty);
}

void Controller::WatchGang(const JobRecord& job, const TaskRecord& failed,
                           absl::Time now) {
  bool several = false;
  for (const TaskRecord& t : job.tasks) {
    if (t.node != failed.node) several = true;
  }
  if (!several) return;
  gang_watch_[job.id] = now;
  // Ask every other node of the run whether its agent is there: a refused
  // connection ends the wait for it at once.
  for (const TaskRecord& t : job.tasks) {
    const int n = NodeIndex(t.node);
    if (TaskLive(t) && t.node != failed.node && n >= 0 &&
        nodes_[n].state == Node::State::kUp) {
      Probe(n, now);
    }
  }
}

bool Controller::LossCausedGangFailure(const JobRecord& job,
                                       const TaskRecord& task) const {
  auto it = gang_watch_.find(job.id);
  if (it == gang_watch_.end()) return false;
  const int n = NodeIndex(task.node);
  return n >= 0 &&
         nodes_[n].last_heartbeat <= it->second + options_.heartbeat_interval;
}

void Controller::StepGangWatch(absl::Time now,
                               std::vector<const JobRecord*>* dirty) {
  for (auto it = gang_watch_.begin(); it != gang_watch_.end();) {
    auto job_it = jobs_.find(it->first);
    if (job_it == jobs_.end() || job_it->second.state != JobState::kStopping) {
      gang_watch_.erase(it++);
      continue;
    }
    JobRecord& job = job_it->second;
    const absl::Time failed = it->second;
    ++it;  // `LostWithNode` may end the run (and the watch)
    // A node of the run silent since the failure: lost with its tasks once
    // its agent refused a connection, or after two heartbeat intervals
    // without a word or an answer.
    for (size_t k = 0; k < job.tasks.size(); ++k) {
      TaskRecord& t = job.tasks[k];
      if (!TaskLive(t)) continue;
      const int n = NodeIndex(t.node);
      if (n < 0 || nodes_[n].state != Node::State::kUp) continue;
      Node& node = nodes_[n];
      if (node.last_heartbeat > failed) continue;
      const bool since = node.probed_at >= failed && !node.probing;
      const bool refused = since && node.probe == Node::Probe::kRefused;
      const bool quiet = now - failed >= 2 * options_.heartbeat_interval &&
                         !node.probing &&
                         !(since && node.probe == Node::Probe::kAnswered);
      if (!refused && !quiet) continue;
      if (!node.suspect) {
        node.suspect = true;
        UpdateSchedulable(n);
      }
      LostWithNode(
          job, t,
          absl::StrCat("task ", t.index, " was lost with its node ", t.node,
                       " (silent since another task of the run failed; ",
                       refused ? kRefusedText : "no heartbeat or answer since",
                       ")"),
          now);
      dirty->push_back(&job);
      if (job.state != JobState::kStopping) break;
    }
  }
}

}  // namespace loom
