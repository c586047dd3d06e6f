#include "loom/server/job_events_store.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace loom {

std::string EventsKey(JobId id) {
  return absl::StrFormat("%s%020d", kEventsPrefix, id);
}

std::optional<JobId> IdOfEventsKey(std::string_view key) {
  if (key.substr(0, kEventsPrefix.size()) != kEventsPrefix) {
    return std::nullopt;
  }
  std::string_view digits = key.substr(kEventsPrefix.size());
  if (digits.size() != 20) return std::nullopt;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  JobId id = 0;
  if (!absl::SimpleAtoi(std::string(digits), &id) || id < 1) return std::nullopt;
  return id;
}

std::string JobStoreText(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json JobHistoryToJson(const JobRecord& job) {
  nlohmann::json out;
  out["id"] = job.id;
  out["events"] = job.events.ToJson();
  if (job.events.dropped() > 0) out["events_dropped"] = job.events.dropped();
  if (job.checkpoint_time) {
    out["checkpoint"] = {{"time", FormatTimestamp(*job.checkpoint_time)},
                         {"run", job.checkpoint_run}};
    if (job.checkpoint_step) out["checkpoint"]["step"] = *job.checkpoint_step;
  }
  return out;
}

absl::Status ApplyJobHistoryJson(const nlohmann::json& history, JobId id,
                                 JobRecord* job) {
  try {
    if (!history.is_object()) {
      return absl::InvalidArgumentError("the history is not an object");
    }
    if (history.at("id").get<JobId>() != id) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the history is of job ", history.at("id").dump(), ", not ", id));
    }
    absl::StatusOr<JobEvents> events = JobEvents::FromJson(
        history.at("events"), history.value("events_dropped", int64_t{0}));
    if (!events.ok()) return events.status();
    std::optional<absl::Time> time;
    std::optional<int64_t> step;
    int run = 0;
    if (history.contains("checkpoint")) {
      const nlohmann::json& c = history.at("checkpoint");
      absl::StatusOr<absl::Time> t =
          ParseTimestamp(c.at("time").get<std::string>());
      if (!t.ok()) return t.status();
      time = *t;
      run = c.value("run", 0);
      if (c.contains("step")) step = c.at("step").get<int64_t>();
    }
    job->events = *std::move(events);
    if (time) {
      job->checkpoint_time = time;
      job->checkpoint_step = step;
      job->checkpoint_run = run;
    }
    return absl::OkStatus();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a job history: ", e.what()));
  }
}

std::string DroppedHistoryLogLine(const KeyValue& kv, std::string_view why) {
  nlohmann::json line = {{"level", "error"},
                         {"event", "dropped_job_history"},
                         {"key", kv.key},
                         {"version", kv.version},
                         {"bytes", kv.value.size()},
                         {"reason", std::string(why)}};
  return JobStoreText(line);
}

void JobWriteCache::AddWrites(const JobRecord& job,
                              std::vector<Mutation>* mutations) {
  std::string record = JobStoreText(JobRecordToJson(job));
  std::string history = JobStoreText(JobHistoryToJson(job));
  auto it = written_.find(job.id);
  const bool record_changed =
      it == written_.end() || it->second.record != record;
  const bool history_changed =
      it == written_.end() || it->second.history != history;
  if (record_changed)
    mutations->push_back(Mutation::Put(JobKey(job.id), record));
  if (history_changed) {
    mutations->push_back(Mutation::Put(EventsKey(job.id), history));
  }
  if (record_changed || history_changed) {
    pending_[job.id] = {std::move(record), std::move(history)};
  }
}

void JobWriteCache::Finish(bool ok) {
  for (auto& [id, w] : pending_) {
    if (ok) {
      written_[id] = std::move(w);
    } else {
      written_.erase(id);
    }
  }
  pending_.clear();
}

void JobWriteCache::Set(JobId id, std::string record_text,
                        std::string history_text) {
  written_[id] = {std::move(record_text), std::move(history_text)};
}

}  // namespace loom
