#include "loom/cli/run_spec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "loom/cli/reply_fields.h"
#include "loom/common/units.h"
#include "loom/core/job_array.h"
#include "loom/core/job_dependency.h"
#include "loom/core/job_spec.h"
#include "loom/core/labels.h"

namespace loom {

using cli::Field;
using cli::Int;
using cli::Items;
using cli::Json;
using cli::Str;

std::string DefaultJobName(const std::vector<std::string>& command) {
  return JobNameFromPath(command.empty() ? "" : command[0]);
}

namespace {

// The container of `loom run --image`; InvalidArgument naming the flag.
absl::Status AddContainer(const RunFlags& f, JobSpec* spec) {
  if (f.image.empty()) {
    for (const auto& [given, flag] :
         {std::pair<bool, const char*>{!f.mounts.empty(), "--mount"},
          {!f.container_workdir.empty(), "--container-workdir"},
          {f.writable, "--writable"},
          {!f.shm_size.empty(), "--shm-size"}}) {
      if (given) {
        return absl::InvalidArgumentError(absl::StrCat(
            flag, ": only applies with --image (the job runs in an image)"));
      }
    }
    return absl::OkStatus();
  }
  ContainerSpec c;
  c.image = f.image;
  for (const std::string& text : f.mounts) {
    absl::StatusOr<ContainerMount> m = ParseContainerMount(text);
    if (!m.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mount ", text, ": ", m.status().message()));
    }
    c.mounts.push_back(*std::move(m));
  }
  if (!f.container_workdir.empty()) {
    absl::StatusOr<std::string> dir =
        NormalizeAbsolutePath(f.container_workdir);
    if (!dir.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--container-workdir: ", dir.status().message()));
    }
    c.workdir = *std::move(dir);
  }
  c.writable = f.writable;
  if (!f.shm_size.empty()) {
    absl::StatusOr<int64_t> bytes = ParseBytes(f.shm_size);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shm-size: ", bytes.status().message()));
    }
    c.shm_size_bytes = *bytes;
  }
  spec->container = std::move(c);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<nlohmann::json> BuildRunSpec(const RunFlags& f) {
  if (f.command.empty()) {
    return absl::InvalidArgumentError(
        "no command given (loom run -g N [flags] -- CMD [ARGS...])");
  }
  // Given empty: the flag's error, not -g's (it would mean whole GPUs).
  for (const auto& [given, flag, example] :
       {std::tuple{&f.mig, "--mig", "a MIG profile such as 1g.18gb"},
        std::tuple{&f.gpu_memory, "--gpu-memory",
                   "a memory size such as 20Gi"}}) {
    if (given->has_value() && (*given)->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": must not be empty (give ", example, ")"));
    }
  }
  const bool slice = f.mig.has_value() || f.gpu_memory.has_value();
  if (f.mig.has_value() && f.gpu_memory.has_value()) {
    return absl::InvalidArgumentError(
        "--mig and --gpu-memory exclude each other (a MIG instance is not "
        "shared)");
  }
  if (slice && f.nodes > 0) {
    return absl::InvalidArgumentError(
        "--nodes: not with --mig or --gpu-memory (each task takes part of "
        "one GPU; -g says how many tasks)");
  }
  if (f.gpus < 1 && !(slice && f.gpus == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("-g: the number of GPUs in total must be at least 1, "
                     "got ",
                     f.gpus));
  }
  if (f.nodes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nodes: must be at least 1, got ", f.nodes));
  }
  if (f.nodes > 0 && f.gpus % f.nodes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("-g ", f.gpus,
                     " GPUs cannot be spread evenly over "
                     "--nodes ",
                     f.nodes, " (give a multiple of the node count)"));
  }
  if (f.procs_per_node < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--procs-per-node: must be at least 1, got ", f.procs_per_node));
  }
  JobSpec spec;
  spec.name = f.name.empty() ? DefaultJobName(f.command) : f.name;
  if (!f.project.empty()) spec.project = f.project;
  if (!f.gpu_model.empty()) spec.gpu_model = absl::AsciiStrToLower(f.gpu_model);
  if (slice) {
    spec.tasks = std::max(f.gpus, 1);
    spec.mig = absl::AsciiStrToLower(f.mig.value_or(""));
    if (f.gpu_memory.has_value()) {
      absl::StatusOr<int64_t> bytes = ParseBytes(*f.gpu_memory);
      if (!bytes.ok() || *bytes <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--gpu-memory: '", *f.gpu_memory,
                         "' is not a memory size such as 20Gi"));
      }
      spec.gpu_share_bytes = *bytes;
    }
  } else {
    spec.gpus = f.gpus;
    spec.nodes = f.nodes;
  }
  if (!f.time_limit.empty()) {
    absl::StatusOr<absl::Duration> limit = ParseDuration(f.time_limit);
    if (!limit.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--time-limit: ", std::string(limit.status().message())));
    }
    if (*limit <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--time-limit: must be longer than 0, got '", f.time_limit, "'"));
    }
    spec.time_limit = *limit;
  }
  if (f.procs_per_node > 0) spec.processes_per_task = f.procs_per_node;
  for (const std::string& kv : f.env) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--env: '", kv, "' is not NAME=VALUE"));
    }
    spec.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const std::string& c : f.constraints) {
    absl::StatusOr<std::pair<std::string, std::string>> kv = ParseConstraint(c);
    if (!kv.ok()) return kv.status();
    auto [it, inserted] = spec.node_selector.insert(*kv);
    if (!inserted && it->second != kv->second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--constraint: '", kv->first,
                       "' is given twice with different values"));
    }
  }
  spec.hold = f.hold;
  spec.command = f.command;
  if (absl::Status st =
          ApplyDependencyFlags(f.dependency, f.kill_on_invalid_dep, &spec);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = ApplyArrayFlag(f.array, &spec); !st.ok()) return st;
  if (absl::Status st = AddContainer(f, &spec); !st.ok()) return st;

  // The spec parser is the one judge of a valid spec: read the JSON back
  // and report its errors under the flags' names.
  const std::string text = JobSpecToJson(spec);
  constexpr absl::string_view kSource = "loom run";
  if (absl::StatusOr<JobSpec> check = ParseJobSpec(text, "loom run");
      !check.ok()) {
    std::string m(check.status().message());
    if (absl::StartsWith(m, kSource)) {  // drop "loom run:1:23: "
      const size_t space = m.find(": ");
      if (space != std::string::npos) m = m.substr(space + 2);
    }
    static const std::pair<const char*, const char*> kFlagOf[] = {
        {"name: ", "--name: "},
        {"project: ", "--project: "},
        {"resources.gpu_model: ", "--gpu-model: "},
        {"resources.gpus: ", "-g: "},
        {"resources.mig: ", "--mig: "},
        {"resources.gpu_share.memory: ", "--gpu-memory: "},
        {"resources.nodes: ", "--nodes: "},
        {"resources.processes_per_task: ", "--procs-per-node: "},
        {"env.", "--env "},
        {"node_selector.", "--constraint "},
        {"time_limit: ", "--time-limit: "},
        {"dependency: ", "--dependency: "},
        {"container.image: ", "--image: "},
        {"container.mounts", "--mount"},
        {"container.workdir: ", "--container-workdir: "},
        {"container.shm_size: ", "--shm-size: "},
        {"command", "command"},
    };
    for (const auto& [field, flag] : kFlagOf) {
      if (absl::StartsWith(m, field)) {
        m = absl::StrCat(flag, m.substr(std::strlen(field)));
        break;
      }
    }
    return absl::InvalidArgumentError(m);
  }
  return Json::parse(text, nullptr, false);
}

absl::Status ApplyDependencyFlags(std::string_view dependency,
                                  bool kill_on_invalid_dep, JobSpec* spec) {
  if (!dependency.empty()) {
    absl::StatusOr<JobDependency> dep = ParseDependency(dependency);
    if (!dep.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--dependency: ", std::string(dep.status().message())));
    }
    spec->dependency = FormatDependency(*dep);
  }
  if (kill_on_invalid_dep) spec->kill_on_invalid_dep = true;
  return absl::OkStatus();
}

absl::Status ApplyArrayFlag(std::string_view array, JobSpec* spec) {
  if (array.empty()) return absl::OkStatus();
  absl::StatusOr<ArraySpec> a = ParseArraySpec(array);
  if (!a.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--array: ", std::string(a.status().message())));
  }
  spec->array = FormatArraySpec(*a);
  return absl::OkStatus();
}

bool IsFinalJobState(std::string_view state) {
  return state == "succeeded" || state == "failed" || state == "cancelled";
}

int WaitExitCode(const nlohmann::json& job) {
  if (Str(job, "state") == "succeeded") return 0;
  // The code that one object (the job or a task) reports, or 0.
  auto code_of = [](const Json& o) -> int {
    if (std::optional<int64_t> sig = Int(o, "signal"); sig && *sig > 0) {
      return static_cast<int>(128 + std::min<int64_t>(*sig, 127));
    }
    if (std::optional<int64_t> code = Int(o, "exit_code"); code) {
      if (*code < 0)
        return static_cast<int>(128 + std::min<int64_t>(-*code, 127));
      if (*code > 0) return static_cast<int>(std::min<int64_t>(*code, 255));
    }
    return 0;
  };
  if (int code = code_of(job); code != 0) return code;
  if (const Json* p = Field(job, "placement"); p != nullptr) {
    std::vector<const Json*> tasks;
    for (const Json& t : Items(*p, "tasks")) tasks.push_back(&t);
    std::stable_sort(
        tasks.begin(), tasks.end(), [](const Json* a, const Json* b) {
          return Int(*a, "index").value_or(0) < Int(*b, "index").value_or(0);
        });
    for (const Json* t : tasks) {
      if (int code = code_of(*t); code != 0) return code;
    }
  }
  return 1;
}

}  // namespace loom
