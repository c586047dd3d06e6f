#include "loom/agent/probe_spec.h"

#include <algorithm>
#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"
#include "loom/agent/json_values.h"
#include "loom/agent/launch_request.h"

namespace loom {
namespace {

using json = nlohmann::json;

constexpr int64_t kMinProbeMs = 100;
constexpr int64_t kMaxProbeMs = 3600000;
constexpr int64_t kMaxProbeFailures = 100;

bool ValidProbePath(const std::string& path) {
  if (path.empty() || path.size() > kMaxProbePathLength || path[0] != '/') {
    return false;
  }
  return std::all_of(path.begin(), path.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u < 0x7f;  // no spaces, controls or non-ASCII bytes
  });
}

}  // namespace

absl::StatusOr<ProbeSpec> ParseProbeSpec(const json& v, const std::string& name,
                                         std::string* field) {
  if (!v.is_object()) {
    return FieldError(
        field, name,
        absl::StrCat("must be an object {http, period_ms, timeout_ms, "
                     "failures, initial_delay_ms}, got ",
                     v.type_name()));
  }
  auto find = [&](const char* key) -> const json* {
    auto it = v.find(key);
    return it == v.end() || it->is_null() ? nullptr : &*it;
  };
  // A whole number from `min` to `max`; when not given, `*out` stays.
  auto get_ms = [&](const char* key, int64_t min, int64_t max,
                    const std::string& max_text, int64_t* out) -> absl::Status {
    const json* n = find(key);
    if (n == nullptr) return absl::OkStatus();
    std::optional<int64_t> value = AsInt(*n);
    if (!value || *value < min || *value > max) {
      return FieldError(field, absl::StrCat(name, ".", key),
                        absl::StrCat("must be a whole number from ", min,
                                     " to ", max_text, ", got ", Dump(*n)));
    }
    *out = *value;
    return absl::OkStatus();
  };
  ProbeSpec p;
  const json* http = find("http");
  if (http == nullptr) {
    return FieldError(field, absl::StrCat(name, ".http"),
                      "is required: the path to GET, e.g. \"/healthz\"");
  }
  if (!http->is_string() || !ValidProbePath(http->get<std::string>())) {
    return FieldError(
        field, absl::StrCat(name, ".http"),
        absl::StrCat("must be a path starting with '/', of at most ",
                     kMaxProbePathLength,
                     " visible ASCII characters (no spaces), got ",
                     Dump(*http).substr(0, 80)));
  }
  p.http = http->get<std::string>();
  int64_t period = 1000;
  if (absl::Status s = get_ms("period_ms", kMinProbeMs, kMaxProbeMs,
                              absl::StrCat(kMaxProbeMs), &period);
      !s.ok()) {
    return s;
  }
  int64_t timeout = std::min<int64_t>(1000, period);
  // A timeout from 1 ms, as the service spec allows.
  if (absl::Status s = get_ms("timeout_ms", 1, period,
                              absl::StrCat(period, " (period_ms)"), &timeout);
      !s.ok()) {
    return s;
  }
  int64_t failures = 3;
  if (absl::Status s = get_ms("failures", 1, kMaxProbeFailures,
                              absl::StrCat(kMaxProbeFailures), &failures);
      !s.ok()) {
    return s;
  }
  int64_t delay = 0;
  if (absl::Status s = get_ms("initial_delay_ms", 0, kMaxProbeMs,
                              absl::StrCat(kMaxProbeMs), &delay);
      !s.ok()) {
    return s;
  }
  p.period = absl::Milliseconds(period);
  p.timeout = absl::Milliseconds(timeout);
  p.failures = static_cast<int>(failures);
  p.initial_delay = absl::Milliseconds(delay);
  return p;
}

json ProbeSpecJson(const ProbeSpec& probe) {
  return {{"http", probe.http},
          {"period_ms", absl::ToInt64Milliseconds(probe.period)},
          {"timeout_ms", absl::ToInt64Milliseconds(probe.timeout)},
          {"failures", probe.failures},
          {"initial_delay_ms", absl::ToInt64Milliseconds(probe.initial_delay)}};
}

}  // namespace loom
