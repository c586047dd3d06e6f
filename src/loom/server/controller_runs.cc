// The runs of a job: starting its tasks (their launch requests), stopping
// them, and what follows once they end (the job's outcome, or a restart or
// requeue under its restart policy).

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fmt/format.h"
#include "loom/common/units.h"
#include "loom/core/retry.h"
#include "loom/server/container_check.h"
#include "loom/server/controller.h"
#include "loom/server/task_slice.h"

namespace loom {
namespace {

// How long a job whose launch an agent was not ready for waits before it is
// queued again, at least.
constexpr absl::Duration kNotReadyBackoff = absl::Milliseconds(500);

// Ends the reason of a job whose launch an agent refused (HTTP 400).
constexpr const char* kNotAgainAfterRefusal =
    "; not queued again: the agent refused the task as specified, and would "
    "refuse it again";

// The run that just ended unfinished joins the job's past runs (the oldest
// goes beyond `kKeptPastRuns`), for its logs. A run that never launched a
// task, or that an agent was not ready for (503), left nothing to read.
void KeepPastRun(JobRecord& job) {
  if (job.tasks.empty() || job.launch_not_ready) return;
  PastRun run;
  run.run = job.restart_count;
  run.nodes.resize(job.tasks.size());
  for (const TaskRecord& t : job.tasks) {
    if (t.index >= 0 && static_cast<size_t>(t.index) < run.nodes.size()) {
      run.nodes[t.index] = t.node;
    }
  }
  job.past_runs.push_back(std::move(run));
  if (job.past_runs.size() > kKeptPastRuns) {
    job.past_runs.erase(job.past_runs.begin());
  }
}

}  // namespace

void Controller::StartJob(JobRecord& job, absl::Time now) {
  const SchedJob* sj = scheduler_->Find(job.id);
  const Placement& p = sj->placement;
  job.state = JobState::kRunning;
  job.start_time = now;
  job.running_time.reset();
  job.tasks.clear();
  ++counters_.decisions;
  if (job.restart_count == 0) {
    counters_.queue_wait.Observe(absl::ToDoubleSeconds(now - job.submit_time));
  }
  job.switch_level = p.switch_level;
  job.switch_name =
      p.switch_index >= 0 ? cluster_->topology.sw(p.switch_index).name : "";
  // MASTER_PORT: a port of the rank-0 node not used by another live job.
  Node& master = nodes_[p.tasks[0].node];
  int port = options_.master_port_base +
             static_cast<int>(job.id % options_.master_port_count);
  for (int i = 0;
       i < options_.master_port_count && master.master_ports.contains(port);
       ++i) {
    port = options_.master_port_base +
           (port - options_.master_port_base + 1) % options_.master_port_count;
  }
  master.master_ports.insert(port);
  job.master_port = port;

  for (size_t i = 0; i < p.tasks.size(); ++i) {
    TaskRecord t;
    t.index = static_cast<int>(i);
    t.node = cluster_->nodes[p.tasks[i].node].name;
    for (int g = 0; g < kMaxGpusPerNode; ++g) {
      if (p.tasks[i].gpu_mask & (1u << g)) t.gpus.push_back(g);
    }
    if (p.tasks[i].partial()) {
      t.gpus = {p.tasks[i].slice_gpu};
      t.slice = SliceOf(scheduler_->state(), p.tasks[i]);
    }
    t.task_id = TaskIdOf(job.id, t.index, job.restart_count);
    t.state = TaskRecord::State::kLaunching;
    job.tasks.push_back(std::move(t));
  }
  for (const TaskRecord& t : job.tasks)
    actions_.push_back(LaunchAction(job, t));
  const std::string on_spares = StartedOnSpares(job);
  NoteJobChanged(job);  // `after` dependencies
  if (job.recovery && job.recovery->run + 1 == job.restart_count &&
      job.recovery->stopped && !job.recovery->placed) {
    job.recovery->placed = now;
  }
  job.AddEvent(
      now,
      absl::StrCat(
          "started on ", p.nodes, " node(s)",
          job.switch_name.empty() ? ""
                                  : absl::StrCat(" under ", job.switch_name),
          " (", job.tasks.size(), " task(s))",
          // Image locality: when the choice was the image's.
          p.preferred_tasks > 0
              ? absl::StrCat("; ", p.preferred_tasks, " of ", job.tasks.size(),
                             " on nodes that hold its image")
              : "",
          on_spares));
}

AgentAction Controller::LaunchAction(const JobRecord& job,
                                     const TaskRecord& t) const {
  const int procs = job.spec.processes_per_task;
  // No dir and no root: the agent gives the job one on each node.
  const std::string ckpt =
      !job.spec.checkpoint.dir.empty() ? job.spec.checkpoint.dir
      : options_.checkpoint_root.empty()
          ? ""
          : absl::StrCat(options_.checkpoint_root, "/", job.id);
  nlohmann::json env = job.spec.env;
  // A MIG task's device is its instance, which only the agent knows
  // (MIG-<uuid>); it sets the variable.
  if (!t.slice || t.slice->mig.empty()) {
    env["CUDA_VISIBLE_DEVICES"] = absl::StrJoin(t.gpus, ",");
  }
  env["MASTER_ADDR"] = NodeHost(job.tasks[0].node);
  env["MASTER_PORT"] = std::to_string(job.master_port);
  env["WORLD_SIZE"] = std::to_string(job.tasks.size() * procs);
  env["NODE_RANK"] = std::to_string(t.index);
  env["LOCAL_WORLD_SIZE"] = std::to_string(procs);
  env["LOOM_JOB_ID"] = std::to_string(job.id);
  env["LOOM_TASK_INDEX"] = std::to_string(t.index);
  // The task's own node as the others reach it, and the job's user: what a
  // batch script's SLURM_JOB_NODELIST and SLURM_JOB_USER are made of.
  env["LOOM_NODE_HOST"] = NodeHost(t.node);
  env["LOOM_JOB_USER"] = job.spec.user;
  env["LOOM_RESTART_COUNT"] = std::to_string(job.restart_count);
  if (job.array_job != 0) {
    // Slurm's SLURM_ARRAY_* under loom's names (sbatch scripts get both).
    env["LOOM_ARRAY_JOB_ID"] = std::to_string(job.array_job);
    env["LOOM_ARRAY_TASK_ID"] = std::to_string(job.array_index);
    if (auto it = arrays_.find(job.array_job); it != arrays_.end()) {
      const std::vector<int>& ix = it->second.indices;
      env["LOOM_ARRAY_TASK_COUNT"] = std::to_string(ix.size());
      env["LOOM_ARRAY_TASK_MIN"] = std::to_string(ix.front());
      env["LOOM_ARRAY_TASK_MAX"] = std::to_string(ix.back());
    }
  }
  if (!ckpt.empty()) env["LOOM_CHECKPOINT_DIR"] = ckpt;
  AgentAction a;
  a.kind = AgentAction::Kind::kLaunch;
  a.node = t.node;
  const int n = NodeIndex(t.node);
  a.address = n >= 0 ? nodes_[n].address : "";
  a.task_id = t.task_id;
  a.job = job.id;
  a.run = job.restart_count;
  a.body = {{"task_id", t.task_id},
            {"node", t.node},
            {"job_id", job.id},
            {"user", job.spec.user},
            {"task_index", t.index},
            {"argv", job.spec.command},
            {"env", env},
            {"working_dir", job.spec.working_dir},
            {"gpus", t.gpus},
            {"processes", procs},
            {"rank_base", t.index * procs}};
  if (job.spec.container.has_value()) {
    a.body["container"] = ContainerLaunchJson(*job.spec.container);
  }
  // Tasks run with no_new_privs unless the node's pool lets them gain
  // privileges (docs/security.md).
  if (n >= 0 && cluster_->pools[cluster_->nodes[n].pool]
                    .allow_privilege_escalation) {
    a.body["allow_privilege_escalation"] = true;
  }
  if (t.slice) a.body["slice"] = SliceJson(*t.slice);
  if (!job.data_versions.empty()) {
    std::vector<int> nodes;  // in task order
    for (const TaskRecord& other : job.tasks) {
      nodes.push_back(NodeIndex(other.node));
    }
    a.body["data"] = DataLaunchJson(job, NodeIndex(t.node), nodes);
  }
  // A service replica: its port and probes (docs/services.md).
  nlohmann::json extras = LaunchExtras(job);
  for (auto& [key, value] : extras.items()) a.body[key] = std::move(value);
  return a;
}

void Controller::StopTasks(JobRecord& job, int signal, absl::Duration grace) {
  for (const TaskRecord& t : job.tasks) StopTask(job, t, signal, grace);
}

void Controller::StopTask(const JobRecord& job, const TaskRecord& t, int signal,
                          absl::Duration grace) {
  if (!TaskLive(t)) return;
  const int n = NodeIndex(t.node);
  if (n < 0 || nodes_[n].state == Node::State::kDown) return;
  AgentAction a;
  a.kind = AgentAction::Kind::kStop;
  a.node = t.node;
  a.address = nodes_[n].address;
  a.task_id = t.task_id;
  a.job = job.id;
  a.body = {{"signal", signal}, {"grace_ms", absl::ToInt64Milliseconds(grace)}};
  actions_.push_back(std::move(a));
}

void Controller::TaskEnded(JobRecord& job, TaskRecord& task, absl::Time now,
                           const std::string& why) {
  const bool lost = task.state == TaskRecord::State::kLost;
  const bool failed = lost || task.exit_code.value_or(0) != 0 || task.signal;
  if (failed && job.state == JobState::kRunning) {
    if (!lost) ++counters_.failures["task_failed"];
    job.state = JobState::kStopping;
    job.reason =
        !why.empty() ? why
        : lost
            ? absl::StrCat("task ", task.index, " on ", task.node, " was lost")
        : task.signal ? absl::StrCat("task ", task.index, " killed by ",
                                     SignalName(*task.signal))
                      : absl::StrCat("task ", task.index, " exited with code ",
                                     task.exit_code.value_or(-1));
    job.AddEvent(now, job.reason + "; stopping the other tasks");
    if (!job.recovery || job.recovery->run != job.restart_count) {
      job.recovery.emplace();
      job.recovery->run = job.restart_count;
      job.recovery->cause = job.reason;
      job.recovery->lost = job.recovery->detected = now;
    }
    // A gang that lost a task cannot go on: the others get the stop
    // signal and little grace (they may hang in a collective with it).
    StopTasks(job, job.spec.cancel_signal,
              lost ? std::min(job.spec.cancel_grace, kLostGangGrace)
                   : job.spec.cancel_grace);
    // The others may have failed with a node of theirs: watch for it.
    if (!lost && !job.cancel_requested) WatchGang(job, task, now);
  }
  if (std::any_of(job.tasks.begin(), job.tasks.end(), TaskLive)) return;
  FinishJob(job, now);
}

void Controller::LostWithNode(JobRecord& job, TaskRecord& task,
                              const std::string& why, absl::Time now) {
  // Not the job's fault: the gang is queued again as a moved job is
  // (`requeue`, unlimited by default), without using up a restart, as
  // Slurm requeues a batch job whose node failed. Only when this loss is
  // what stops the run, or what made another task of it fail first (it
  // failed in its collective with this one); a run already failing for
  // its own reasons keeps its own end.
  std::string reason = why;
  const bool caused = job.state == JobState::kStopping && !job.preempted &&
                      LossCausedGangFailure(job, task);
  if ((job.state == JobState::kRunning || caused) && !job.cancel_requested) {
    if (job.node_losses < kMaxNodeLossRequeues) {
      job.preempted = true;
      ++job.node_losses;
    } else {
      absl::StrAppend(&reason, "; its runs lost their node ", job.node_losses,
                      " times, the most loom requeues: this loss is the "
                      "job's failure");
    }
    const int n = NodeIndex(task.node);
    const absl::Time seen =
        n >= 0 ? std::min(now, nodes_[n].last_heartbeat) : now;
    if (caused) {
      job.reason = absl::StrCat(reason, "; ", job.reason,
                                " before, in its collective with it");
      job.AddEvent(now, job.reason);
    }
    if (!job.recovery || job.recovery->run != job.restart_count) {
      job.recovery.emplace();
      job.recovery->run = job.restart_count;
      job.recovery->cause = reason;
      job.recovery->lost = seen;
      job.recovery->detected = now;
    } else {
      job.recovery->cause = caused ? job.reason : reason;
      job.recovery->lost = std::min(job.recovery->lost, seen);
    }
  }
  if (job.preempted) failed_at_[job.id] = now;  // recovery: until it runs
  task.state = TaskRecord::State::kLost;
  TaskEnded(job, task, now, reason);
}

void Controller::FinishJob(JobRecord& job, absl::Time now) {
  bool ok = true;
  std::optional<int> code;
  for (const TaskRecord& t : job.tasks) {
    if (t.state == TaskRecord::State::kLost) {
      ok = false;
      continue;
    }
    const int c = t.signal ? 128 + *t.signal : t.exit_code.value_or(0);
    if (c != 0) {
      ok = false;
      if (!code) code = c;
    }
  }
  job.exit_code = code.value_or(ok ? 0 : 1);
  // Goodput: a run that succeeded, or that its user cancelled, kept its
  // work; any other lost what it did after its last checkpoint.
  ChargeRun(job, now, job.cancel_requested || (ok && !job.preempted));
  if (!job.tasks.empty()) {
    const int master = NodeIndex(job.tasks[0].node);
    if (master >= 0) nodes_[master].master_ports.erase(job.master_port);
  }
  std::vector<std::string> spares =
      job.spec.spares > 0 ? HeldSpares(job.id) : std::vector<std::string>{};
  (void)scheduler_->Finish(job.id, now);
  gang_watch_.erase(job.id);
  const bool preempted = job.preempted && !job.cancel_requested;
  RetryDecision retry;
  if (job.launch_refused && !job.cancel_requested) {
    ok = false;
    if (job.exit_code == 0) job.exit_code = 1;
    absl::StrAppend(&job.reason, kNotAgainAfterRefusal);
  } else if (preempted || (!ok && !job.cancel_requested)) {
    retry = DecideRetry(job.spec.restart, job.spec.requeue,
                        preempted ? RunEnd::kRequeued : RunEnd::kFailed,
                        job.restarts_used, job.requeues);
    if (!retry.again && preempted) {
      // Asked to stop, so its exit code says nothing: it did not finish.
      ok = false;
      if (job.exit_code == 0) job.exit_code = 1;
    }
    if (!retry.why_not.empty()) {
      absl::StrAppend(&job.reason, "; not queued again: ", retry.why_not);
    }
  }
  if (retry.again) {
    // The restart policy: the whole gang goes back to the queue after the
    // backoff, with LOOM_RESTART_COUNT one higher and new task ids. A
    // preempted (or moved) job follows `requeue` and does not use up its
    // restarts.
    const std::string why = job.reason.empty()
                                ? absl::StrCat("exit code ", *job.exit_code)
                                : job.reason;
    // A launch the node was not ready for (503) waits a little: long
    // enough for the heartbeat that says why (a GPU's MIG mode change
    // waits) to take the node out, so that the job does not bounce off it.
    const absl::Duration wait = job.launch_not_ready
                                    ? std::max(retry.wait, kNotReadyBackoff)
                                    : retry.wait;
    if (preempted) {
      // A run that never started on a node not ready for it is no requeue.
      if (!job.launch_not_ready) ++job.requeues;
    } else {
      ++job.restarts_used;
      failed_at_[job.id] = now;  // recovery time: until it runs again
    }
    KeepPastRun(job);
    ++job.restart_count;
    job.preempted = false;
    job.launch_not_ready = false;
    job.state = JobState::kPending;
    job.not_before = now + wait;
    job.reason = preempted
                     ? absl::StrCat("requeued: ", why)
                     : absl::StrCat("restart ", job.restarts_used, " of ",
                                    job.spec.restart.max, " after: ", why);
    job.AddEvent(now, absl::StrCat(job.reason, "; queued again in ",
                                   FormatDurationShort(wait)));
    // After a node loss: the survivors and spares for the next run.
    KeepSpareHints(job,
                   preempted ? std::move(spares) : std::vector<std::string>{});
    job.tasks.clear();
    job.exit_code.reset();
    job.start_time.reset();
    job.running_time.reset();
    if (job.recovery && job.recovery->run + 1 == job.restart_count) {
      job.recovery->stopped = now;
    }
    backoff_.insert(job.id);
    // No backoff: queued now, so that the pass under way (or the next) can
    // place it.
    if (wait <= absl::ZeroDuration()) QueueAfterBackoff(job, now);
    return;
  }
  if (job.recovery && job.recovery->run == job.restart_count) {
    job.recovery.reset();  // no run follows this one
  }
  job.spare_nodes.clear();
  job.last_nodes.clear();
  if (job.cancel_requested) {
    job.state = JobState::kCancelled;
  } else if (ok) {
    job.state = JobState::kSucceeded;
    job.reason = "";
  } else {
    job.state = JobState::kFailed;
  }
  job.end_time = now;
  job.AddEvent(now, absl::StrCat(std::string(JobStateName(job.state)),
                                 " (exit code ", *job.exit_code, ")"));
  NoteJobChanged(job);
}

void Controller::NoteRunning(JobRecord& job, absl::Time now) {
  if (job.running_time.has_value()) return;
  for (const TaskRecord& t : job.tasks) {
    if (t.state != TaskRecord::State::kRunning) return;
  }
  job.running_time = now;
  if (job.recovery && job.recovery->placed && !job.recovery->running &&
      job.recovery->run + 1 == job.restart_count) {
    job.recovery->running = now;
  }
  if (auto it = failed_at_.find(job.id); it != failed_at_.end()) {
    counters_.recovery.Observe(absl::ToDoubleSeconds(now - it->second));
    failed_at_.erase(it);
  }
  job.AddEvent(
      now, absl::StrCat("running: all ", job.tasks.size(), " task(s) started"));
}

void Controller::NoteProgress(JobRecord& job, absl::Time now) {
  if (!job.recovery || !job.recovery->running || job.recovery->progress ||
      job.recovery->run + 1 != job.restart_count) {
    return;
  }
  job.recovery->progress = now;
  const auto seconds = RecoveryPhaseSeconds(*job.recovery);
  for (size_t i = 0; i < seconds.size(); ++i) {
    if (seconds[i]) counters_.recovery_phases[i].Observe(*seconds[i]);
  }
  job.AddEvent(now,
               absl::StrCat("recovered: ", RecoverySummary(*job.recovery)));
}

void Controller::Evict(JobRecord& job, const std::string& why, absl::Time now) {
  if (job.state != JobState::kRunning) return;
  job.state = JobState::kStopping;
  job.preempted = true;
  job.reason = why;
  const SchedJob* sj = scheduler_->Find(job.id);
  const double lost = sj != nullptr ? sj->WorkAtRisk(now) / 3600.0 : 0;
  job.AddEvent(now, absl::StrCat(why, "; sending ",
                                 SignalName(job.spec.checkpoint.signal),
                                 " (checkpoint now), SIGKILL after ",
                                 FormatDurationShort(job.spec.checkpoint.grace),
                                 "; ", fmt::format("{:.2f}", lost),
                                 " GPU-hours since the last checkpoint"));
  StopTasks(job, job.spec.checkpoint.signal, job.spec.checkpoint.grace);
}

}  // namespace loom
