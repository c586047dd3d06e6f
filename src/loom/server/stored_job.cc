#include "loom/server/stored_job.h"

#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "loom/server/job_events_store.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

constexpr std::string_view kJobPrefix = "/jobs/";
constexpr size_t kMaxReasonBytes = 500;

// The id of a job key: exactly "/jobs/" + 20 decimal digits, id >= 1.
std::optional<JobId> IdOfKey(std::string_view key) {
  if (key.substr(0, kJobPrefix.size()) != kJobPrefix) return std::nullopt;
  std::string_view digits = key.substr(kJobPrefix.size());
  if (digits.size() != 20) return std::nullopt;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  JobId id = 0;
  if (!absl::SimpleAtoi(std::string(digits), &id) || id < 1) {
    return std::nullopt;
  }
  return id;
}

// A string field of an object, or "" (never throws).
std::string StringField(const nlohmann::json& j, const char* name) {
  if (!j.is_object()) return "";
  auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool RoundTrips(const JobRecord& job) {
  try {
    return JobRecordFromJson(
               nlohmann::json::parse(JobRecordToJson(job).dump(
                   -1, ' ', false, nlohmann::json::error_handler_t::replace)))
        .ok();
  } catch (const std::exception&) {
    return false;
  }
}

JobRecord StandIn(JobId id, const nlohmann::json& raw, const std::string& why,
                  absl::Time now) {
  JobRecord job;
  job.id = id;
  job.spec.name = "unreadable-record";
  job.spec.command = {"/bin/false"};
  job.state = JobState::kFailed;
  job.reason = absl::StrCat("unreadable record: ", why);
  job.submit_time = now;
  job.end_time = now;
  job.AddEvent(now, job.reason);
  // Salvage what identifies the job to its owner, each part only if the
  // result still reads back.
  const nlohmann::json spec =
      raw.is_object() && raw.contains("spec") ? raw["spec"] : nlohmann::json();
  for (auto [field, target] :
       {std::pair<const char*, std::string*>{"user", &job.spec.user},
        {"project", &job.spec.project},
        {"name", &job.spec.name}}) {
    const std::string value = StringField(spec, field);
    if (value.empty()) continue;
    const std::string before = *target;
    *target = value;
    if (!RoundTrips(job)) *target = before;
  }
  if (absl::StatusOr<absl::Time> t =
          ParseTimestamp(StringField(raw, "submit_time"));
      t.ok() && *t <= now) {
    job.submit_time = *t;
  }
  return job;
}

}  // namespace

std::string QuarantineKey(const std::string& key, int64_t version) {
  return absl::StrCat("/quarantine", key, "@", version);
}

absl::StatusOr<StoredJob> ReadStoredJob(const KeyValue& kv, absl::Time now) {
  const std::optional<JobId> id = IdOfKey(kv.key);
  if (!id) {
    return absl::InvalidArgumentError(
        absl::StrCat("store key \"", absl::CEscape(kv.key),
                     "\" is not a job key (/jobs/ and 20 digits)"));
  }
  nlohmann::json j = nlohmann::json::parse(kv.value, nullptr, false);
  absl::Status problem;
  StoredJob out;
  if (j.is_discarded()) {
    problem = absl::DataLossError("not JSON");
  } else if (absl::StatusOr<JobRecord> rec = JobRecordFromJson(j); !rec.ok()) {
    problem = absl::DataLossError(rec.status().message());
  } else if (rec->id != *id) {
    problem = absl::DataLossError(
        absl::StrCat("the record is of job ", rec->id, ", not ", *id));
  } else {
    out.record = *std::move(rec);
    return out;
  }
  std::string why(problem.message());
  if (why.size() > kMaxReasonBytes) {
    why.resize(kMaxReasonBytes);
    why += "...";
  }
  out.problem = absl::DataLossError(why);
  out.record = StandIn(*id, j.is_discarded() ? nlohmann::json() : j, why, now);
  return out;
}

std::string UnreadableRecordLogLine(const KeyValue& kv, const absl::Status& why,
                                    const std::string& kept_at) {
  nlohmann::json line = {{"level", "error"},
                         {"event", "unreadable_record"},
                         {"key", kv.key},
                         {"version", kv.version},
                         {"bytes", kv.value.size()},
                         {"kept_at", kept_at.empty() ? kv.key : kept_at},
                         {"reason", std::string(why.message())}};
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<StoredJob> LoadStoredJob(StateStore& store, const KeyValue& kv,
                                        absl::Time now, std::string* log_line) {
  log_line->clear();
  absl::StatusOr<StoredJob> stored = ReadStoredJob(kv, now);
  if (!stored.ok()) {
    *log_line = UnreadableRecordLogLine(kv, stored.status(), "");
    return stored;
  }
  if (stored->problem.ok()) return stored;
  const std::string kept_at = QuarantineKey(kv.key, kv.version);
  absl::StatusOr<int64_t> rev = store.Commit(
      {{kv.key, kv.version}},
      {Mutation::Put(kept_at, kv.value),
       Mutation::Put(kv.key, JobStoreText(JobRecordToJson(stored->record))),
       Mutation::Put(EventsKey(stored->record.id),
                     JobStoreText(JobHistoryToJson(stored->record)))});
  if (rev.ok()) {
    *log_line = UnreadableRecordLogLine(kv, stored->problem, kept_at);
  } else {
    *log_line = UnreadableRecordLogLine(
        kv,
        absl::DataLossError(absl::StrCat(
            stored->problem.message(),
            "; could not quarantine it: ", rev.status().message())),
        "");
  }
  return stored;
}

}  // namespace loom
