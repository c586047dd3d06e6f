#include "loom/server/job_record.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "loom/core/job_array.h"
#include "loom/server/task_slice.h"

namespace loom {
namespace {

constexpr const char* kTaskStates[] = {"launching", "running", "exited",
                                       "lost"};

}  // namespace

bool TaskLive(const TaskRecord& t) {
  return t.state == TaskRecord::State::kLaunching ||
         t.state == TaskRecord::State::kRunning;
}

double CurrentRunGpuSeconds(const JobRecord& job, absl::Time now) {
  std::optional<GpuSpan> span = CurrentRunSpan(job, now);
  if (!span) return 0;
  return span->gpus * absl::ToDoubleSeconds(span->end - span->start);
}

std::optional<GpuSpan> CurrentRunSpan(const JobRecord& job, absl::Time now) {
  if (!job.start_time) return std::nullopt;
  GpuSpan span;
  span.start = *job.start_time;
  span.end = std::max(now, *job.start_time);
  for (const TaskRecord& t : job.tasks) {
    span.gpus += static_cast<int>(t.gpus.size());
  }
  return span;
}

void ChargeRun(JobRecord& job, absl::Time now, bool work_kept) {
  std::optional<GpuSpan> run = CurrentRunSpan(job, now);
  if (!run || run->gpus <= 0 || run->end <= run->start) return;
  const double seconds =
      run->gpus * absl::ToDoubleSeconds(run->end - run->start);
  job.gpu_seconds += seconds;
  if (!work_kept) {
    // The run's own last checkpoint, if it saved one.
    absl::Time kept = run->start;
    if (job.checkpoint_time && job.checkpoint_run == job.restart_count) {
      kept = std::clamp(*job.checkpoint_time, run->start, run->end);
    }
    run->lost_from = kept;
    job.lost_gpu_seconds += run->gpus * absl::ToDoubleSeconds(run->end - kept);
  }
  job.unledgered.push_back(*run);
}

nlohmann::json GoodputJson(const JobRecord& job, absl::Time now) {
  double allocated = job.gpu_seconds;
  if (job.state == JobState::kRunning || job.state == JobState::kStopping) {
    allocated += CurrentRunGpuSeconds(job, now);
  }
  return {{"gpu_seconds", allocated},
          {"lost_gpu_seconds", job.lost_gpu_seconds},
          {"ratio", allocated > 0
                        ? nlohmann::json(1.0 - job.lost_gpu_seconds / allocated)
                        : nlohmann::json(nullptr)}};
}

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kHeld:
      return "held";
    case JobState::kPending:
      return "pending";
    case JobState::kRunning:
      return "running";
    case JobState::kStopping:
      return "stopping";
    case JobState::kSucceeded:
      return "succeeded";
    case JobState::kFailed:
      return "failed";
    case JobState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

absl::StatusOr<JobState> ParseJobState(std::string_view name) {
  for (JobState s : {JobState::kHeld, JobState::kPending, JobState::kRunning,
                     JobState::kStopping, JobState::kSucceeded,
                     JobState::kFailed, JobState::kCancelled}) {
    if (JobStateName(s) == name) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown job state '", std::string(name),
                   "' (held, pending, running, stopping, succeeded, failed, "
                   "cancelled)"));
}

bool IsFinal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

absl::Status CheckLiveRun(const JobRecord& job, int64_t run) {
  if (run != job.restart_count) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id, " is on run ", job.restart_count));
  }
  if (job.state != JobState::kRunning && job.state != JobState::kStopping) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.id, " is ", std::string(JobStateName(job.state))));
  }
  return absl::OkStatus();
}

std::string FormatTimestamp(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

absl::StatusOr<absl::Time> ParseTimestamp(std::string_view text) {
  absl::Time t;
  std::string err;
  if (!absl::ParseTime("%Y-%m-%dT%H:%M:%E*SZ", std::string(text),
                       absl::UTCTimeZone(), &t, &err)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad time '", std::string(text), "': ", err));
  }
  return t;
}

std::string JobKey(JobId id) { return fmt::format("/jobs/{:020d}", id); }

nlohmann::json JobRecordToJson(const JobRecord& j) {
  nlohmann::json out;
  out["id"] = j.id;
  out["spec"] = nlohmann::json::parse(JobSpecToJson(j.spec));
  out["state"] = std::string(JobStateName(j.state));
  out["reason"] = j.reason;
  out["submit_time"] = FormatTimestamp(j.submit_time);
  out["start_time"] = j.start_time
                          ? nlohmann::json(FormatTimestamp(*j.start_time))
                          : nlohmann::json(nullptr);
  out["running_time"] = j.running_time
                            ? nlohmann::json(FormatTimestamp(*j.running_time))
                            : nlohmann::json(nullptr);
  out["end_time"] = j.end_time ? nlohmann::json(FormatTimestamp(*j.end_time))
                               : nlohmann::json(nullptr);
  if (j.not_before) out["not_before"] = FormatTimestamp(*j.not_before);
  out["exit_code"] =
      j.exit_code ? nlohmann::json(*j.exit_code) : nlohmann::json(nullptr);
  out["restart_count"] = j.restart_count;
  if (j.preempted) out["preempted"] = true;
  if (j.launch_refused) out["launch_refused"] = true;
  out["restarts_used"] = j.restarts_used;
  if (j.preempted_by != 0) out["preempted_by"] = j.preempted_by;
  if (j.requeues != 0) out["requeues"] = j.requeues;
  if (j.node_losses != 0) out["node_losses"] = j.node_losses;
  if (!j.request_id.empty()) out["request_id"] = j.request_id;
  if (j.array_job != 0) {
    out["array_job"] = j.array_job;
    out["array_index"] = j.array_index;
  }
  if (!j.array_cancelled.empty()) out["array_cancelled"] = j.array_cancelled;
  if (j.gpu_seconds != 0) out["gpu_seconds"] = j.gpu_seconds;
  if (j.lost_gpu_seconds != 0) out["lost_gpu_seconds"] = j.lost_gpu_seconds;
  // The checkpoint and the events are the job's history, stored apart
  // (`JobHistoryToJson`, under `EventsKey`).
  out["cancel_requested"] = j.cancel_requested;
  out["switch_level"] = j.switch_level;
  out["switch"] = j.switch_name;
  out["master_port"] = j.master_port;
  if (j.recovery) out["recovery"] = RecoveryToJson(*j.recovery);
  if (!j.spare_nodes.empty()) out["spare_nodes"] = j.spare_nodes;
  if (!j.last_nodes.empty()) out["last_nodes"] = j.last_nodes;
  if (!j.past_runs.empty()) {
    nlohmann::json runs = nlohmann::json::array();
    for (const PastRun& r : j.past_runs) {
      runs.push_back({{"run", r.run}, {"nodes", r.nodes}});
    }
    out["past_runs"] = std::move(runs);
  }
  if (!j.data_versions.empty()) {
    nlohmann::json data = nlohmann::json::array();
    for (const JobDataVersion& d : j.data_versions) {
      data.push_back({{"source", d.source},
                      {"mount", d.mount},
                      {"version", d.version},
                      {"files", d.files},
                      {"bytes", d.bytes}});
    }
    out["data_versions"] = std::move(data);
  }
  if (!j.service.empty()) {
    out["service"] = j.service;
    out["revision"] = j.revision;
    if (j.replica_probes.is_object() && !j.replica_probes.empty()) {
      out["replica_probes"] = j.replica_probes;
    }
    if (j.drain_since) out["drain_since"] = FormatTimestamp(*j.drain_since);
  }
  nlohmann::json tasks = nlohmann::json::array();
  for (const TaskRecord& t : j.tasks) {
    tasks.push_back({{"index", t.index},
                     {"node", t.node},
                     {"gpus", t.gpus},
                     {"task_id", t.task_id},
                     {"state", kTaskStates[static_cast<int>(t.state)]},
                     {"exit_code", t.exit_code ? nlohmann::json(*t.exit_code)
                                               : nlohmann::json(nullptr)},
                     {"signal", t.signal ? nlohmann::json(*t.signal)
                                         : nlohmann::json(nullptr)}});
    if (t.port) tasks.back()["port"] = *t.port;
    if (t.slice) tasks.back()["slice"] = SliceJson(*t.slice);
    // Kept so that a restarted server serves the replica at once (its
    // next heartbeat says again).
    if (t.ready) tasks.back()["ready"] = true;
  }
  out["tasks"] = std::move(tasks);
  return out;
}

absl::StatusOr<JobRecord> JobRecordFromJson(const nlohmann::json& in) {
  try {
    JobRecord j;
    j.id = in.at("id").get<JobId>();
    absl::StatusOr<JobSpec> spec =
        ParseStoredJobSpec(in.at("spec").dump(), absl::StrCat("job ", j.id));
    if (!spec.ok()) return spec.status();
    j.spec = *std::move(spec);
    absl::StatusOr<JobState> state =
        ParseJobState(in.at("state").get<std::string>());
    if (!state.ok()) return state.status();
    j.state = *state;
    j.reason = in.value("reason", "");
    absl::StatusOr<absl::Time> submit =
        ParseTimestamp(in.at("submit_time").get<std::string>());
    if (!submit.ok()) return submit.status();
    j.submit_time = *submit;
    for (auto [key, field] :
         {std::pair<const char*, std::optional<absl::Time>*>{"start_time",
                                                             &j.start_time},
          {"running_time", &j.running_time},
          {"not_before", &j.not_before},
          {"end_time", &j.end_time}}) {
      if (!in.contains(key) || in[key].is_null()) continue;
      absl::StatusOr<absl::Time> t = ParseTimestamp(in[key].get<std::string>());
      if (!t.ok()) return t.status();
      *field = *t;
    }
    if (in.contains("exit_code") && !in["exit_code"].is_null()) {
      j.exit_code = in["exit_code"].get<int>();
    }
    j.restart_count = in.value("restart_count", 0);
    j.preempted = in.value("preempted", false);
    j.launch_refused = in.value("launch_refused", false);
    j.restarts_used = in.value("restarts_used", 0);
    j.preempted_by = in.value("preempted_by", JobId{0});
    j.requeues = in.value("requeues", 0);
    j.node_losses = in.value("node_losses", 0);
    j.request_id = in.value("request_id", std::string());
    j.array_job = in.value("array_job", JobId{0});
    j.array_index = in.value("array_index", -1);
    j.array_cancelled = in.value("array_cancelled", std::string());
    j.gpu_seconds = in.value("gpu_seconds", 0.0);
    j.lost_gpu_seconds = in.value("lost_gpu_seconds", 0.0);
    if (in.contains("checkpoint") && in["checkpoint"].is_object()) {
      const nlohmann::json& c = in["checkpoint"];
      absl::StatusOr<absl::Time> t =
          ParseTimestamp(c.at("time").get<std::string>());
      if (!t.ok()) return t.status();
      j.checkpoint_time = *t;
      j.checkpoint_run = c.value("run", 0);
      if (c.contains("step")) j.checkpoint_step = c["step"].get<int64_t>();
    }
    j.cancel_requested = in.value("cancel_requested", false);
    j.switch_level = in.value("switch_level", 0);
    j.switch_name = in.value("switch", "");
    j.master_port = in.value("master_port", 0);
    if (auto r = in.find("recovery"); r != in.end() && !r->is_null()) {
      absl::StatusOr<RecoveryTimes> recovery = RecoveryFromJson(*r);
      if (!recovery.ok()) return recovery.status();
      j.recovery = *std::move(recovery);
    }
    j.spare_nodes = in.value("spare_nodes", std::vector<std::string>{});
    j.last_nodes = in.value("last_nodes", std::vector<std::string>{});
    if (auto runs = in.find("past_runs");
        runs != in.end() && runs->is_array()) {
      for (const nlohmann::json& r : *runs) {
        if (!r.is_object() ||
            !r.value("run", nlohmann::json()).is_number_integer()) {
          continue;
        }
        PastRun past;
        past.run = r["run"].get<int>();
        if (auto nodes = r.find("nodes");
            nodes != r.end() && nodes->is_array()) {
          for (const nlohmann::json& n : *nodes) {
            past.nodes.push_back(n.is_string() ? n.get<std::string>() : "");
          }
        }
        j.past_runs.push_back(std::move(past));
      }
    }
    if (auto d = in.find("data_versions"); d != in.end() && d->is_array()) {
      for (const nlohmann::json& v : *d) {
        if (!v.is_object()) continue;
        JobDataVersion dv;
        dv.source = v.value("source", "");
        dv.mount = v.value("mount", "");
        dv.version = v.value("version", "");
        dv.files = v.value("files", int64_t{0});
        dv.bytes = v.value("bytes", int64_t{0});
        j.data_versions.push_back(std::move(dv));
      }
    }
    j.service = in.value("service", std::string());
    j.revision = in.value("revision", std::string());
    if (auto p = in.find("replica_probes"); p != in.end() && p->is_object()) {
      j.replica_probes = *p;
    }
    if (auto d = in.find("drain_since"); d != in.end() && d->is_string()) {
      absl::StatusOr<absl::Time> t = ParseTimestamp(d->get<std::string>());
      if (!t.ok()) return t.status();
      j.drain_since = *t;
    }
    for (const nlohmann::json& t : in.at("tasks")) {
      TaskRecord task;
      task.index = t.at("index").get<int>();
      task.node = t.at("node").get<std::string>();
      task.gpus = t.at("gpus").get<std::vector<int>>();
      task.task_id = t.at("task_id").get<std::string>();
      if (auto sl = t.find("slice"); sl != t.end()) {
        absl::StatusOr<TaskSlice> slice = ParseSlice(*sl);
        if (!slice.ok()) return slice.status();
        if (task.gpus.size() != 1) {
          return absl::InvalidArgumentError("a slice task has one GPU");
        }
        task.slice = *std::move(slice);
      }
      if (auto p = t.find("port"); p != t.end() && p->is_number_integer()) {
        task.port = p->get<int>();
      }
      if (auto r = t.find("ready"); r != t.end() && r->is_boolean()) {
        task.ready = r->get<bool>();
      }
      const std::string state_name = t.at("state").get<std::string>();
      bool found = false;
      for (int s = 0; s < 4; ++s) {
        if (state_name == kTaskStates[s]) {
          task.state = static_cast<TaskRecord::State>(s);
          found = true;
        }
      }
      if (!found) {
        return absl::InvalidArgumentError(
            absl::StrCat("job ", j.id, ": unknown task state ", state_name));
      }
      if (!t.at("exit_code").is_null())
        task.exit_code = t["exit_code"].get<int>();
      if (!t.at("signal").is_null()) task.signal = t["signal"].get<int>();
      j.tasks.push_back(std::move(task));
    }
    // Older records hold the events themselves; newer ones keep them under
    // their own key (docs/store.md, "Job events").
    if (in.contains("events")) {
      absl::StatusOr<JobEvents> events = JobEvents::FromJson(
          in.at("events"), in.value("events_dropped", int64_t{0}));
      if (!events.ok()) return events.status();
      j.events = *std::move(events);
    }
    return j;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a job record: ", e.what()));
  }
}

bool JobMatches(const JobQuery& f, const JobRecord& job) {
  if (!f.states.empty() && std::find(f.states.begin(), f.states.end(),
                                     job.state) == f.states.end()) {
    return false;
  }
  if (!f.project.empty() && job.spec.project != f.project) return false;
  if (!f.user.empty() && job.spec.user != f.user) return false;
  return true;
}

nlohmann::json JobApiJson(
    const JobRecord& job, const Cluster& cluster, const std::string& reason,
    const JobShape* shape,
    const std::function<std::string(const std::string& node)>& host_of) {
  nlohmann::json j;
  j["id"] = job.id;
  j["name"] = job.spec.name;
  j["project"] = job.spec.project;
  j["user"] = job.spec.user;
  j["kind"] = std::string(JobKindName(job.spec.kind));
  j["priority"] = job.spec.priority;
  j["preemptible"] = job.spec.preemptible;
  j["state"] = std::string(JobStateName(job.state));
  j["reason"] = reason;
  if (shape != nullptr) {
    j["tasks"] = shape->tasks;
    j["gpus_per_task"] = shape->gpus_per_task;
    j["gpus"] = shape->TotalGpus();
  } else if (absl::StatusOr<JobRequest> r =
                 ToJobRequest(job.spec, cluster, job.id, job.submit_time);
             r.ok()) {
    j["tasks"] = r->shape.tasks;
    j["gpus_per_task"] = r->shape.gpus_per_task;
    j["gpus"] = r->shape.TotalGpus();
  }
  j["gpu_model"] = job.spec.gpu_model;
  j["submit_time"] = FormatTimestamp(job.submit_time);
  j["start_time"] = job.start_time
                        ? nlohmann::json(FormatTimestamp(*job.start_time))
                        : nlohmann::json(nullptr);
  j["running_time"] = job.running_time
                          ? nlohmann::json(FormatTimestamp(*job.running_time))
                          : nlohmann::json(nullptr);
  j["end_time"] = job.end_time ? nlohmann::json(FormatTimestamp(*job.end_time))
                               : nlohmann::json(nullptr);
  j["exit_code"] =
      job.exit_code ? nlohmann::json(*job.exit_code) : nlohmann::json(nullptr);
  j["restart_count"] = job.restart_count;
  j["requeues"] = job.requeues;
  j["node_losses"] = job.node_losses;
  j["restarts_used"] = job.restarts_used;
  if (job.array_job != 0) {
    j["array_job_id"] = job.array_job;
    j["array_task_id"] = job.array_index;
    j["display_id"] = ArrayElementName(job.array_job, job.array_index);
  }
  j["preempted_by"] = job.preempted_by != 0 ? nlohmann::json(job.preempted_by)
                                            : nlohmann::json(nullptr);
  if (job.checkpoint_time) {
    j["checkpoint"] = {{"time", FormatTimestamp(*job.checkpoint_time)},
                       {"run", job.checkpoint_run}};
    if (job.checkpoint_step) j["checkpoint"]["step"] = *job.checkpoint_step;
  } else {
    j["checkpoint"] = nullptr;
  }
  j["recovery"] =
      job.recovery ? RecoveryApiJson(*job.recovery) : nlohmann::json(nullptr);
  if (!job.service.empty()) {
    j["service"] = job.service;
    j["revision"] = job.revision.substr(0, 12);
    if (job.drain_since) j["drain_since"] = FormatTimestamp(*job.drain_since);
  }
  // Only for a job that asked for spares, as `spares` in its spec.
  if (job.spec.spares > 0) j["spare_nodes"] = job.spare_nodes;
  // Earlier runs whose logs can still be read (`loom logs --run N`).
  nlohmann::json past = nlohmann::json::array();
  for (const PastRun& r : job.past_runs) {
    past.push_back({{"run", r.run}, {"nodes", r.nodes}});
  }
  j["past_runs"] = std::move(past);
  if (!job.tasks.empty()) {
    nlohmann::json tasks = nlohmann::json::array();
    absl::flat_hash_set<std::string> nodes;
    for (const TaskRecord& t : job.tasks) {
      nodes.insert(t.node);
      const bool pulling =
          t.pull.has_value() && t.state == TaskRecord::State::kLaunching;
      tasks.push_back(
          {{"index", t.index},
           {"node", t.node},
           {"address", host_of(t.node)},
           {"gpus", t.gpus},
           {"task_id", t.task_id},
           {"state",
            std::string(pulling                                    ? "pulling"
                        : t.state == TaskRecord::State::kLaunching ? "launching"
                        : t.state == TaskRecord::State::kRunning   ? "running"
                        : t.state == TaskRecord::State::kExited    ? "exited"
                                                                   : "lost")},
           {"exit_code", t.exit_code ? nlohmann::json(*t.exit_code)
                                     : nlohmann::json(nullptr)}});
      if (t.slice) tasks.back()["slice"] = SliceJson(*t.slice);
      if (t.port) {
        tasks.back()["port"] = *t.port;
        tasks.back()["ready"] = t.ready;
      }
      if (pulling) {
        tasks.back()["pull"] = {{"phase", t.pull->phase},
                                {"bytes_done", t.pull->bytes_done},
                                {"bytes_total", t.pull->bytes_total}};
      }
    }
    j["placement"] = {{"switch_level", job.switch_level},
                      {"switch", job.switch_name},
                      {"nodes", nodes.size()},
                      {"tasks", std::move(tasks)}};
  } else {
    j["placement"] = nullptr;
  }
  j["spec"] = nlohmann::json::parse(JobSpecToJson(job.spec));
  j["events"] = job.events.ToJson();
  if (job.events.dropped() > 0) j["events_dropped"] = job.events.dropped();
  return j;
}

std::string TaskIdOf(JobId job, int index, int run) {
  return absl::StrCat(job, ".", index, ".", run);
}

}  // namespace loom
