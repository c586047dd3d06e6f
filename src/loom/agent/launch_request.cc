#include "loom/agent/launch_request.h"

#include <algorithm>
#include <climits>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "loom/agent/data_step.h"
#include "loom/agent/json_values.h"
#include "loom/agent/node_table.h"

namespace loom {
namespace {

using json = nlohmann::json;

constexpr int kMaxGpuIndex = 1023;

// The `slice` of a launch body (docs/agent.md "MIG"): {"mig", "profile",
// "start", "layout": [[name, start], ...]} or {"share_bytes"}.
absl::StatusOr<SliceRequest> ParseSlice(const json& v, std::string* field) {
  if (!v.is_object()) {
    return FieldError(field, "slice",
                      "must be an object: {mig, profile, start, layout} or "
                      "{share_bytes}");
  }
  SliceRequest s;
  const bool share = v.contains("share_bytes");
  if (share == v.contains("mig")) {
    return FieldError(field, "slice",
                      "needs either share_bytes or mig (with profile, start "
                      "and layout)");
  }
  auto whole = [&](const char* key, int64_t min, int64_t max,
                   int64_t* out) -> absl::Status {
    auto it = v.find(key);
    std::optional<int64_t> n = it == v.end() ? std::nullopt : AsInt(*it);
    if (!n || *n < min || *n > max) {
      return FieldError(
          field, absl::StrCat("slice.", key),
          absl::StrCat("must be a whole number from ", min, " to ", max,
                       ", got ", it == v.end() ? "nothing" : Dump(*it)));
    }
    *out = *n;
    return absl::OkStatus();
  };
  auto profile_name = [](const json& n) {
    return n.is_string() && !n.get<std::string>().empty() &&
           n.get<std::string>().size() <= 32;
  };
  if (share) {
    if (absl::Status st = whole("share_bytes", 1, INT64_MAX, &s.share_bytes);
        !st.ok()) {
      return st;
    }
    return s;
  }
  if (!profile_name(v["mig"])) {
    return FieldError(field, "slice.mig",
                      "must be a MIG profile name such as \"1g.18gb\"");
  }
  s.mig = v["mig"].get<std::string>();
  int64_t n = 0;
  if (absl::Status st = whole("profile", 0, 63, &n); !st.ok()) return st;
  s.profile = static_cast<int>(n);
  if (absl::Status st = whole("start", 0, 7, &n); !st.ok()) return st;
  s.start = static_cast<int>(n);
  auto layout = v.find("layout");
  if (layout == v.end() || !layout->is_array() || layout->empty() ||
      layout->size() > 8) {
    return FieldError(field, "slice.layout",
                      "must be a list of 1 to 8 [profile, start] pairs");
  }
  bool has_own = false;
  for (size_t i = 0; i < layout->size(); ++i) {
    const json& e = (*layout)[i];
    std::optional<int64_t> start =
        e.is_array() && e.size() == 2 ? AsInt(e[1]) : std::nullopt;
    if (!start || !profile_name(e[0]) || *start < 0 || *start > 7) {
      return FieldError(field, absl::StrCat("slice.layout[", i, "]"),
                        absl::StrCat("must be [profile name, start 0 to 7], "
                                     "got ",
                                     Dump(e).substr(0, 80)));
    }
    s.layout.emplace_back(e[0].get<std::string>(), static_cast<int>(*start));
    has_own = has_own || (s.layout.back().first == s.mig &&
                          s.layout.back().second == s.start);
  }
  if (!has_own) {
    return FieldError(field, "slice.layout",
                      absl::StrCat("has no ", s.mig, " at memory slice ",
                                   s.start, " (the task's own instance)"));
  }
  return s;
}

}  // namespace

bool ValidTaskId(std::string_view id) {
  if (id.empty() || id.size() > kMaxTaskIdLength || id == "." || id == "..") {
    return false;
  }
  return std::all_of(id.begin(), id.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
           c == '_' || c == '-';
  });
}

absl::Status FieldError(std::string* out, const std::string& field,
                        const std::string& what) {
  if (out != nullptr) *out = field;
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::StatusOr<LaunchRequest> ParseLaunchRequest(const json& body,
                                                 std::string* field) {
  if (!body.is_object()) {
    return FieldError(
        field, "body",
        absl::StrCat("must be a JSON object, got ", body.type_name()));
  }
  auto find = [&](const char* key) -> const json* {
    auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  auto get_int = [&](const char* key, int64_t min, int64_t max,
                     int64_t* out) -> absl::Status {
    const json* v = find(key);
    if (v == nullptr) return absl::OkStatus();
    std::optional<int64_t> n = AsInt(*v);
    if (!n || *n < min || *n > max) {
      return FieldError(field, key,
                        absl::StrCat("must be a whole number from ", min,
                                     " to ", max, ", got ", Dump(*v)));
    }
    *out = *n;
    return absl::OkStatus();
  };
  auto no_nul = [](const std::string& s) {
    return s.find('\0') == std::string::npos;
  };
  LaunchRequest r;
  if (const json* v = find("node")) {
    if (!v->is_string() || !ValidNodeName(v->get<std::string>())) {
      return FieldError(field, "node", "must be a node name");
    }
    r.node = v->get<std::string>();
  }
  const json* id = find("task_id");
  if (id == nullptr) return FieldError(field, "task_id", "is required");
  if (!id->is_string() || !ValidTaskId(id->get<std::string>())) {
    return FieldError(
        field, "task_id",
        absl::StrCat("must be 1 to ", kMaxTaskIdLength,
                     " of [A-Za-z0-9._-] (not \".\" or \"..\"), got ",
                     Dump(*id)));
  }
  r.task_id = id->get<std::string>();
  if (const json* user = find("user")) {
    if (!user->is_string() || !no_nul(user->get<std::string>()) ||
        user->get<std::string>().size() > 256) {
      return FieldError(field, "user", "must be a user name");
    }
    r.user = user->get<std::string>();
  }
  if (absl::Status s = get_int("job_id", 0, INT64_MAX, &r.job_id); !s.ok()) {
    return s;
  }
  if (absl::Status s = get_int("task_index", 0, INT32_MAX, &r.task_index);
      !s.ok()) {
    return s;
  }
  const json* argv = find("argv");
  if (argv == nullptr) return FieldError(field, "argv", "is required");
  if (!argv->is_array() || argv->empty()) {
    return FieldError(field, "argv", "must be a non-empty list of strings");
  }
  for (size_t i = 0; i < argv->size(); ++i) {
    const json& a = (*argv)[i];
    if (!a.is_string() || !no_nul(a.get<std::string>())) {
      return FieldError(field, absl::StrCat("argv[", i, "]"),
                        "must be a string without NUL bytes");
    }
    r.argv.push_back(a.get<std::string>());
  }
  if (r.argv[0].empty()) {
    return FieldError(field, "argv[0]", "the program must not be empty");
  }
  if (const json* env = find("env")) {
    if (!env->is_object()) {
      return FieldError(field, "env", "must be an object of strings");
    }
    for (auto it = env->begin(); it != env->end(); ++it) {
      const std::string& key = it.key();
      if (key.empty() || key.find('=') != std::string::npos || !no_nul(key)) {
        return FieldError(field, absl::StrCat("env.", key),
                          "is not a valid variable name");
      }
      if (!it.value().is_string() || !no_nul(it.value().get<std::string>())) {
        return FieldError(
            field, absl::StrCat("env.", key),
            absl::StrCat("must be a string, got ", it.value().type_name()));
      }
      r.env[key] = it.value().get<std::string>();
    }
  }
  if (const json* wd = find("working_dir")) {
    if (!wd->is_string() || !no_nul(wd->get<std::string>())) {
      return FieldError(field, "working_dir", "must be a path");
    }
    r.working_dir = wd->get<std::string>();
  }
  if (const json* gpus = find("gpus")) {
    if (!gpus->is_array()) {
      return FieldError(field, "gpus", "must be a list of GPU indices");
    }
    std::set<int> seen;
    for (const json& g : *gpus) {
      std::optional<int64_t> n = AsInt(g);
      if (!n || *n < 0 || *n > kMaxGpuIndex) {
        return FieldError(field, "gpus",
                          absl::StrCat("must be GPU indices from 0 to ",
                                       kMaxGpuIndex, ", got ", Dump(g)));
      }
      if (!seen.insert(static_cast<int>(*n)).second) {
        return FieldError(field, "gpus",
                          absl::StrCat("GPU ", *n, " is listed twice"));
      }
      r.gpus.push_back(static_cast<int>(*n));
    }
  }
  int64_t processes = 1;
  if (absl::Status s = get_int("processes", 1, kMaxProcesses, &processes);
      !s.ok()) {
    return s;
  }
  r.processes = static_cast<int>(processes);
  if (find("rank_base") != nullptr) {
    int64_t rank_base = 0;
    if (absl::Status s = get_int(
            "rank_base", 0, int64_t{INT32_MAX} - kMaxProcesses, &rank_base);
        !s.ok()) {
      return s;
    }
    r.rank_base = rank_base;
  }
  if (const json* limits = find("limits")) {
    if (!limits->is_object()) {
      return FieldError(field, "limits",
                        "must be an object {memory_bytes, cpu_millis}");
    }
    for (const char* key : {"memory_bytes", "cpu_millis"}) {
      auto it = limits->find(key);
      if (it == limits->end() || it->is_null()) continue;
      std::optional<int64_t> n = AsInt(*it);
      if (!n || *n <= 0) {
        return FieldError(field, absl::StrCat("limits.", key),
                          "must be a positive whole number");
      }
      if (std::string(key) == "memory_bytes") {
        r.limits.memory_bytes = *n;
      } else {
        r.limits.cpu_millis = *n;
      }
    }
  }
  if (const json* c = find("container")) {
    absl::StatusOr<ContainerRequest> container =
        ParseContainerRequest(*c, field);
    if (!container.ok()) return container.status();
    r.container = *std::move(container);
  }
  for (auto [key, dest] :
       {std::pair{"port", &r.port},
        std::pair{"allow_privilege_escalation",
                  &r.allow_privilege_escalation}}) {
    const json* v = find(key);
    if (v == nullptr) continue;
    if (!v->is_boolean()) {
      return FieldError(field, key,
                        absl::StrCat("must be true or false, got ",
                                     Dump(*v).substr(0, 80)));
    }
    *dest = v->get<bool>();
  }
  for (const char* key : {"readiness", "liveness"}) {
    const json* v = find(key);
    if (v == nullptr) continue;
    absl::StatusOr<ProbeSpec> probe = ParseProbeSpec(*v, key, field);
    if (!probe.ok()) return probe.status();
    if (!r.port) {
      return FieldError(field, key,
                        "needs \"port\": true (a probe calls the task's "
                        "port)");
    }
    (std::string(key) == "readiness" ? r.readiness : r.liveness) =
        *std::move(probe);
  }
  if (const json* d = find("data")) {
    absl::StatusOr<std::vector<DatasetWant>> data = ParseDataLaunch(*d, field);
    if (!data.ok()) return data.status();
    r.data = *std::move(data);
  }
  if (const json* slice = find("slice")) {
    absl::StatusOr<SliceRequest> parsed = ParseSlice(*slice, field);
    if (!parsed.ok()) return parsed.status();
    if (r.gpus.size() != 1) {
      return FieldError(field, "slice",
                        absl::StrCat("a task on part of a GPU names exactly "
                                     "one GPU in gpus, got ",
                                     r.gpus.size()));
    }
    r.slice = *std::move(parsed);
  }
  return r;
}

}  // namespace loom
