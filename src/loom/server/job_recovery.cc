#include "loom/server/job_recovery.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "fmt/format.h"
#include "loom/server/job_record.h"

namespace loom {

std::array<std::optional<double>, 5> RecoveryPhaseSeconds(
    const RecoveryTimes& r) {
  std::array<std::optional<double>, 5> out;
  const std::array<std::optional<absl::Time>, 6> marks = {
      r.lost, r.detected, r.stopped, r.placed, r.running, r.progress};
  for (size_t i = 0; i < out.size(); ++i) {
    if (marks[i] && marks[i + 1]) {
      out[i] = std::max(0.0, absl::ToDoubleSeconds(*marks[i + 1] - *marks[i]));
    }
  }
  return out;
}

namespace {

nlohmann::json RecoveryTimeOrNull(const std::optional<absl::Time>& t) {
  return t ? nlohmann::json(FormatTimestamp(*t)) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json RecoveryToJson(const RecoveryTimes& r) {
  return {{"run", r.run},
          {"cause", r.cause},
          {"lost", FormatTimestamp(r.lost)},
          {"detected", FormatTimestamp(r.detected)},
          {"stopped", RecoveryTimeOrNull(r.stopped)},
          {"placed", RecoveryTimeOrNull(r.placed)},
          {"running", RecoveryTimeOrNull(r.running)},
          {"progress", RecoveryTimeOrNull(r.progress)}};
}

absl::StatusOr<RecoveryTimes> RecoveryFromJson(const nlohmann::json& j) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError("recovery: must be an object");
  }
  RecoveryTimes r;
  if (auto it = j.find("run"); it != j.end() && it->is_number_integer()) {
    r.run = it->get<int>();
  }
  if (auto it = j.find("cause"); it != j.end() && it->is_string()) {
    r.cause = it->get<std::string>();
  }
  for (auto [key, field] :
       {std::pair<const char*, absl::Time*>{"lost", &r.lost},
        {"detected", &r.detected}}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("recovery.", key, ": must be a timestamp"));
    }
    absl::StatusOr<absl::Time> t = ParseTimestamp(it->get<std::string>());
    if (!t.ok()) return t.status();
    *field = *t;
  }
  for (auto [key, field] : {std::pair<const char*, std::optional<absl::Time>*>{
                                "stopped", &r.stopped},
                            {"placed", &r.placed},
                            {"running", &r.running},
                            {"progress", &r.progress}}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("recovery.", key, ": must be a timestamp"));
    }
    absl::StatusOr<absl::Time> t = ParseTimestamp(it->get<std::string>());
    if (!t.ok()) return t.status();
    *field = *t;
  }
  return r;
}

nlohmann::json RecoveryApiJson(const RecoveryTimes& r) {
  nlohmann::json j = RecoveryToJson(r);
  nlohmann::json phases = nlohmann::json::object();
  const auto seconds = RecoveryPhaseSeconds(r);
  for (size_t i = 0; i < seconds.size(); ++i) {
    phases[std::string(kRecoveryPhases[i])] =
        seconds[i] ? nlohmann::json(*seconds[i]) : nlohmann::json(nullptr);
  }
  j["phases"] = std::move(phases);
  j["total_s"] = r.progress
                     ? nlohmann::json(std::max(
                           0.0, absl::ToDoubleSeconds(*r.progress - r.lost)))
                     : nlohmann::json(nullptr);
  return j;
}

std::string RecoverySummary(const RecoveryTimes& r) {
  const auto seconds = RecoveryPhaseSeconds(r);
  std::vector<std::string> parts;
  for (size_t i = 0; i < seconds.size(); ++i) {
    const std::string name =
        absl::StrReplaceAll(std::string(kRecoveryPhases[i]), {{"_", " "}});
    parts.push_back(seconds[i] ? fmt::format("{} {:.1f}s", name, *seconds[i])
                               : absl::StrCat(name, " -"));
  }
  std::string out = absl::StrJoin(parts, ", ");
  if (r.progress) {
    absl::StrAppend(&out,
                    fmt::format("; {:.1f}s in all",
                                absl::ToDoubleSeconds(*r.progress - r.lost)));
  }
  return out;
}

}  // namespace loom
