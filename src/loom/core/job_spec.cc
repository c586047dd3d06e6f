#include "loom/core/job_spec.h"

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "loom/core/container_spec_yaml.h"
#include "loom/core/dataset_spec_yaml.h"
#include "loom/core/job_array.h"
#include "loom/core/job_dependency_yaml.h"
#include "loom/core/spec_reader.h"
#include "loom/core/yaml_util.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace loom {
namespace {

using internal::FormatDurationExact;
using internal::kMaxGrace;
using yaml::ChildPath;
using yaml::Field;
using yaml::FormatBytesExact;
using yaml::KindOf;
using yaml::MapNode;

// Limits that keep a typo (or a hostile request) from becoming a job that
// exhausts the scheduler or the agent; the limits every spec shares are in
// spec_reader.h.
constexpr int64_t kMaxTasks = 10000;
constexpr int64_t kMaxTotalGpus = 100000;
constexpr int64_t kMaxNodes = 10000;
constexpr int64_t kMaxRestarts = 1000;
constexpr int64_t kMaxRequeues = 1000000;
constexpr absl::Duration kMaxTimeLimit = absl::Hours(24 * 365);

constexpr absl::string_view kResourceFields[] = {
    "gpus_per_task",      "gpus",          "nodes",
    "gpu_model",          "cpus_per_task", "memory_per_task",
    "processes_per_task", "mig",           "gpu_share",
    "nics_per_task"};

// Environment variables the agent sets for every task (DESIGN.md section 5);
// a spec may not set them. Every `LOOM_*` name is reserved as well.
constexpr absl::string_view kReservedEnv[] = {"CUDA_VISIBLE_DEVICES",
                                              "MASTER_ADDR",
                                              "MASTER_PORT",
                                              "WORLD_SIZE",
                                              "RANK",
                                              "LOCAL_RANK",
                                              "NODE_RANK",
                                              "LOCAL_WORLD_SIZE"};

struct SignalEntry {
  absl::string_view name;  // without "SIG"
  int number;
};

constexpr SignalEntry kSignals[] = {
    {"HUP", SIGHUP},       {"INT", SIGINT},   {"QUIT", SIGQUIT},
    {"ILL", SIGILL},       {"TRAP", SIGTRAP}, {"ABRT", SIGABRT},
    {"BUS", SIGBUS},       {"FPE", SIGFPE},   {"KILL", SIGKILL},
    {"USR1", SIGUSR1},     {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},
    {"PIPE", SIGPIPE},     {"ALRM", SIGALRM}, {"TERM", SIGTERM},
    {"CHLD", SIGCHLD},     {"CONT", SIGCONT}, {"STOP", SIGSTOP},
    {"TSTP", SIGTSTP},     {"TTIN", SIGTTIN}, {"TTOU", SIGTTOU},
    {"URG", SIGURG},       {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ},
    {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH},
    {"IO", SIGIO},         {"SYS", SIGSYS},
#ifdef SIGPWR
    {"PWR", SIGPWR},
#endif
#ifdef SIGSTKFLT
    {"STKFLT", SIGSTKFLT},
#endif
};

int MaxSignal() {
#ifdef SIGRTMAX
  return SIGRTMAX;
#else
  return 64;
#endif
}

}  // namespace

bool IsValidProjectName(std::string_view name) {
  return internal::IsValidSpecId(absl::string_view(name.data(), name.size()));
}

bool IsValidUserName(std::string_view name) {
  if (name.empty() || name.size() > kMaxUserNameLength) return false;
  std::string_view body = name;
  if (body.back() == '$') body.remove_suffix(1);
  if (body.empty()) return false;
  const auto first = static_cast<unsigned char>(body[0]);
  if (!absl::ascii_isalnum(first) && first != '_') return false;
  bool digits_only = true;
  for (char c : body) {
    const auto u = static_cast<unsigned char>(c);
    if (!absl::ascii_isalnum(u) && c != '_' && c != '.' && c != '-' &&
        c != '@') {
      return false;
    }
    digits_only &= absl::ascii_isdigit(u);
  }
  return !digits_only;
}

bool IsSettableEnvName(std::string_view name) {
  const absl::string_view n(name.data(), name.size());
  if (n.size() > internal::kMaxEnvNameLength ||
      !internal::IsShellIdentifier(n)) {
    return false;
  }
  // LOOM_FAKE_SECONDS is the one LOOM_ name a job sets: how long its tasks
  // last on agents that run fake tasks (docs/agent.md).
  if (absl::StartsWith(n, "LOOM_") && n != "LOOM_FAKE_SECONDS") return false;
  return std::find(std::begin(kReservedEnv), std::end(kReservedEnv), n) ==
         std::end(kReservedEnv);
}

namespace {

// Turns a job spec document into a `JobSpec`. Every method returns
// InvalidArgument with "<source>:<line>:<column>: <path>: <reason>" on bad
// input. yaml-cpp exceptions are caught by `internal::ParseDocument`.
class JobSpecParser : public internal::SpecReader {
 public:
  // `source` must outlive the parser.
  explicit JobSpecParser(absl::string_view source)
      : internal::SpecReader(source, "job") {}

  absl::StatusOr<JobSpec> Parse(const YAML::Node& root);

 private:
  absl::Status ParseResources(const Field& field, const Field* tasks,
                              JobSpec* spec) const;
  absl::Status ParseCheckpoint(const Field& field, JobSpec* spec) const;
  // `restart` and `requeue`: {max, backoff}; `requeue.max` may also be
  // "unlimited" (-1).
  absl::Status ParseRetry(const Field& field, bool requeue,
                          RestartSpec* out) const;
  absl::Status ParseCancel(const Field& field, JobSpec* spec) const;
};

absl::Status JobSpecParser::ParseResources(const Field& field,
                                           const Field* tasks,
                                           JobSpec* spec) const {
  absl::StatusOr<MapNode> map =
      ReadFields(field.value, field.key,
                 {"gpus_per_task", "gpus", "nodes", "gpu_model",
                  "cpus_per_task", "memory_per_task", "processes_per_task",
                  "mig", "gpu_share", "nics_per_task"});
  if (!map.ok()) return map.status();
  const Field* per_task = map->Find("gpus_per_task");
  const Field* gpus = map->Find("gpus");
  const Field* nodes = map->Find("nodes");

  if (gpus != nullptr) {
    const std::string path = ChildPath(map->path, "gpus");
    for (const Field* other : {tasks, per_task}) {
      if (other == nullptr) continue;
      return Error(
          gpus->key_node, path,
          absl::StrCat("cannot be combined with `",
                       other == tasks ? "tasks" : "resources.gpus_per_task",
                       "` (line ", other->key_node.Mark().line + 1,
                       "); give either `gpus` (and optionally `nodes`) or "
                       "`tasks` with `gpus_per_task`"));
    }
    absl::StatusOr<int64_t> n = ReadInt(gpus->value, path, 1, kMaxTotalGpus);
    if (!n.ok()) return n.status();
    spec->gpus = static_cast<int>(*n);
  }
  if (per_task != nullptr) {
    absl::StatusOr<int64_t> n =
        ReadInt(per_task->value, ChildPath(map->path, "gpus_per_task"), 1,
                kMaxGpusPerNode);
    if (!n.ok()) return n.status();
    spec->gpus_per_task = static_cast<int>(*n);
  }
  if (nodes != nullptr) {
    const std::string path = ChildPath(map->path, "nodes");
    if (gpus == nullptr) {
      return Error(nodes->key_node, path,
                   "only applies with `resources.gpus` (the GPUs are spread "
                   "evenly over that many nodes); with `tasks`, each task "
                   "already takes one node or part of one");
    }
    absl::StatusOr<int64_t> n = ReadInt(nodes->value, path, 1, kMaxNodes);
    if (!n.ok()) return n.status();
    if (spec->gpus % *n != 0) {
      return Error(nodes->value, path,
                   absl::StrCat(spec->gpus,
                                " GPUs cannot be spread evenly "
                                "over ",
                                *n, " nodes"));
    }
    spec->nodes = static_cast<int>(*n);
  }
  if (const Field* f = map->Find("gpu_model"); f != nullptr) {
    absl::StatusOr<std::string> model =
        ReadGpuModel(f->value, ChildPath(map->path, "gpu_model"));
    if (!model.ok()) return model.status();
    spec->gpu_model = *std::move(model);
  }
  if (const Field* f = map->Find("cpus_per_task"); f != nullptr) {
    absl::StatusOr<int64_t> milli =
        ReadCpusMilli(f->value, ChildPath(map->path, "cpus_per_task"));
    if (!milli.ok()) return milli.status();
    spec->cpus_milli_per_task = *milli;
  }
  if (const Field* f = map->Find("memory_per_task"); f != nullptr) {
    absl::StatusOr<int64_t> bytes =
        ReadMemory(f->value, ChildPath(map->path, "memory_per_task"));
    if (!bytes.ok()) return bytes.status();
    spec->memory_bytes_per_task = *bytes;
  }
  const Field* mig = map->Find("mig");
  const Field* share = map->Find("gpu_share");
  if (mig != nullptr || share != nullptr) {
    const Field* slice = mig != nullptr ? mig : share;
    const std::string slice_path = ChildPath(map->path, slice->key);
    // `gpus_per_task: 1` is what the canonical form writes for every spec.
    const Field* many = spec->gpus_per_task != 1 ? per_task : nullptr;
    for (const Field* other : {mig == slice ? share : nullptr, gpus, many}) {
      if (other == nullptr) continue;
      return Error(
          slice->key_node, slice_path,
          absl::StrCat("cannot be combined with `resources.", other->key,
                       "` (line ", other->key_node.Mark().line + 1,
                       "): each task takes one part of one GPU; "
                       "ask for more tasks instead"));
    }
  }
  if (mig != nullptr) {
    absl::StatusOr<std::string> name =
        ReadString(mig->value, ChildPath(map->path, "mig"));
    if (!name.ok()) return name.status();
    spec->mig = absl::AsciiStrToLower(*name);
  }
  if (share != nullptr) {
    const std::string path = ChildPath(map->path, "gpu_share");
    absl::StatusOr<MapNode> s = ReadFields(share->value, path, {"memory"});
    if (!s.ok()) return s.status();
    const Field* memory = s->Find("memory");
    if (memory == nullptr) {
      return Error(share->value, path,
                   "needs `memory`: the part of the GPU's memory each task "
                   "may use, e.g. {memory: 20Gi}");
    }
    absl::StatusOr<int64_t> bytes =
        ReadMemory(memory->value, ChildPath(path, "memory"));
    if (!bytes.ok()) return bytes.status();
    if (*bytes < kMinGpuShareBytes) {
      const std::string text = yaml::ScalarText(memory->value);
      const bool bare =
          !text.empty() && text.find_first_not_of("0123456789") == text.npos;
      return Error(
          memory->value, ChildPath(path, "memory"),
          absl::StrCat("must be at least 1Gi (a CUDA context alone "
                       "takes hundreds of MiB), got '",
                       text, "'",
                       bare ? " (a number without a unit is bytes)" : ""));
    }
    spec->gpu_share_bytes = *bytes;
  }
  if (const Field* f = map->Find("nics_per_task"); f != nullptr) {
    absl::StatusOr<int64_t> n =
        ReadInt(f->value, ChildPath(map->path, "nics_per_task"), 0, 1024);
    if (!n.ok()) return n.status();
    spec->nics_per_task = static_cast<int>(*n);
  }
  if (const Field* f = map->Find("processes_per_task"); f != nullptr) {
    absl::StatusOr<int64_t> n =
        ReadInt(f->value, ChildPath(map->path, "processes_per_task"), 1,
                kMaxProcessesPerTask);
    if (!n.ok()) return n.status();
    spec->processes_per_task = static_cast<int>(*n);
  }
  return absl::OkStatus();
}

absl::Status JobSpecParser::ParseCheckpoint(const Field& field,
                                            JobSpec* spec) const {
  absl::StatusOr<MapNode> map =
      ReadFields(field.value, field.key, {"dir", "signal", "grace"});
  if (!map.ok()) return map.status();
  if (const Field* f = map->Find("dir"); f != nullptr) {
    absl::StatusOr<std::string> dir =
        ReadPath(f->value, ChildPath(map->path, "dir"));
    if (!dir.ok()) return dir.status();
    spec->checkpoint.dir = *std::move(dir);
  }
  if (const Field* f = map->Find("signal"); f != nullptr) {
    absl::StatusOr<int> signal =
        ReadSignal(f->value, ChildPath(map->path, "signal"));
    if (!signal.ok()) return signal.status();
    spec->checkpoint.signal = *signal;
  }
  if (const Field* f = map->Find("grace"); f != nullptr) {
    absl::StatusOr<absl::Duration> grace =
        ReadBoundedDuration(f->value, ChildPath(map->path, "grace"),
                            absl::ZeroDuration(), kMaxGrace);
    if (!grace.ok()) return grace.status();
    spec->checkpoint.grace = *grace;
  }
  return absl::OkStatus();
}

absl::Status JobSpecParser::ParseRetry(const Field& field, bool requeue,
                                       RestartSpec* out) const {
  absl::StatusOr<MapNode> map =
      ReadFields(field.value, field.key, {"max", "backoff"});
  if (!map.ok()) return map.status();
  if (const Field* f = map->Find("max"); f != nullptr) {
    if (requeue && f->value.IsScalar() && f->value.Scalar() == "unlimited") {
      out->max = -1;
    } else {
      absl::StatusOr<int64_t> max =
          ReadInt(f->value, ChildPath(map->path, "max"), 0,
                  requeue ? kMaxRequeues : kMaxRestarts);
      if (!max.ok()) return max.status();
      out->max = static_cast<int>(*max);
    }
  }
  if (const Field* f = map->Find("backoff"); f != nullptr) {
    absl::StatusOr<absl::Duration> backoff =
        ReadBoundedDuration(f->value, ChildPath(map->path, "backoff"),
                            absl::ZeroDuration(), kMaxGrace);
    if (!backoff.ok()) return backoff.status();
    out->backoff = *backoff;
  }
  return absl::OkStatus();
}

absl::Status JobSpecParser::ParseCancel(const Field& field,
                                        JobSpec* spec) const {
  absl::StatusOr<MapNode> map =
      ReadFields(field.value, field.key, {"signal", "grace"});
  if (!map.ok()) return map.status();
  if (const Field* f = map->Find("signal"); f != nullptr) {
    absl::StatusOr<int> signal =
        ReadSignal(f->value, ChildPath(map->path, "signal"));
    if (!signal.ok()) return signal.status();
    spec->cancel_signal = *signal;
  }
  if (const Field* f = map->Find("grace"); f != nullptr) {
    absl::StatusOr<absl::Duration> grace =
        ReadBoundedDuration(f->value, ChildPath(map->path, "grace"),
                            absl::ZeroDuration(), kMaxGrace);
    if (!grace.ok()) return grace.status();
    spec->cancel_grace = *grace;
  }
  return absl::OkStatus();
}

absl::StatusOr<JobSpec> JobSpecParser::Parse(const YAML::Node& root) {
  if (!root.IsMap()) {
    return Error(root, "",
                 absl::StrCat("a job spec must be a map of fields (name, "
                              "command, ...), got ",
                              KindOf(root)));
  }
  // A resources field written at the top level is a common slip; say where
  // it belongs instead of only "unknown field".
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (!it->first.IsScalar()) continue;
    const std::string& key = it->first.Scalar();
    if (std::find(std::begin(kResourceFields), std::end(kResourceFields),
                  key) != std::end(kResourceFields)) {
      return Error(it->first, key,
                   absl::StrCat("unknown field '", key,
                                "' (it belongs under `resources`: write "
                                "resources: {",
                                key, ": ...})"));
    }
  }
  absl::StatusOr<MapNode> map =
      ReadFields(root, "", {"name",        "project",
                            "user",        "kind",
                            "priority",    "preemptible",
                            "tasks",       "resources",
                            "command",     "env",
                            "working_dir", "container",
                            "time_limit",  "checkpoint",
                            "restart",     "requeue",
                            "cancel",      "hold",
                            "labels",      "node_selector",
                            "dependency",  "kill_on_invalid_dep",
                            "array",       "spares",
                            "data"});
  if (!map.ok()) return map.status();

  JobSpec spec;
  absl::StatusOr<const Field*> name_field = Require(*map, "name");
  if (!name_field.ok()) return name_field.status();
  absl::StatusOr<std::string> name = ReadName((*name_field)->value, "name");
  if (!name.ok()) return name.status();
  spec.name = *std::move(name);

  if (const Field* f = map->Find("project"); f != nullptr) {
    absl::StatusOr<std::string> project = ReadId(f->value, f->key);
    if (!project.ok()) return project.status();
    spec.project = *std::move(project);
  }
  if (const Field* f = map->Find("user"); f != nullptr) {
    absl::StatusOr<std::string> user = ReadUser(f->value, f->key);
    if (!user.ok()) return user.status();
    spec.user = *std::move(user);
  }
  if (const Field* f = map->Find("kind"); f != nullptr) {
    absl::StatusOr<std::string> text = ReadText(f->value, f->key, false);
    if (!text.ok()) return text.status();
    absl::StatusOr<JobKind> kind = ParseJobKind(*text);
    if (!kind.ok()) return Error(f->value, f->key, kind.status().message());
    spec.kind = *kind;
  }
  if (const Field* f = map->Find("priority"); f != nullptr) {
    absl::StatusOr<std::string> priority = ReadId(f->value, f->key);
    if (!priority.ok()) return priority.status();
    spec.priority = *std::move(priority);
  }
  if (const Field* f = map->Find("preemptible"); f != nullptr) {
    absl::StatusOr<bool> b = ReadBool(f->value, f->key);
    if (!b.ok()) return b.status();
    spec.preemptible = *b;
  }
  const Field* tasks = map->Find("tasks");
  if (tasks != nullptr) {
    absl::StatusOr<int64_t> n = ReadInt(tasks->value, tasks->key, 1, kMaxTasks);
    if (!n.ok()) return n.status();
    spec.tasks = static_cast<int>(*n);
  }
  if (const Field* f = map->Find("resources"); f != nullptr) {
    if (absl::Status st = ParseResources(*f, tasks, &spec); !st.ok()) return st;
  }

  absl::StatusOr<const Field*> command = Require(*map, "command");
  if (!command.ok()) return command.status();
  if (absl::Status st = ReadCommand(**command, &spec.command); !st.ok()) {
    return st;
  }
  if (const Field* f = map->Find("env"); f != nullptr) {
    if (absl::Status st = ReadEnv(*f, {}, &spec.env); !st.ok()) return st;
  }
  if (const Field* f = map->Find("working_dir"); f != nullptr) {
    absl::StatusOr<std::string> dir = ReadPath(f->value, f->key);
    if (!dir.ok()) return dir.status();
    spec.working_dir = *std::move(dir);
  }
  if (const Field* f = map->Find("container"); f != nullptr) {
    absl::StatusOr<ContainerSpec> container =
        internal::ParseContainerField(*this, *f);
    if (!container.ok()) return container.status();
    spec.container = *std::move(container);
    if (const Field* dir = map->Find("working_dir"); dir != nullptr) {
      return Error(dir->key_node, "working_dir",
                   "does not apply to a job in an image (it is a host "
                   "path); write container.workdir instead");
    }
  }
  if (const Field* f = map->Find("data"); f != nullptr) {
    absl::StatusOr<std::vector<DatasetSpec>> data =
        internal::ParseDataField(*this, *f);
    if (!data.ok()) return data.status();
    spec.data = *std::move(data);
  }
  if (const Field* f = map->Find("time_limit"); f != nullptr) {
    absl::StatusOr<absl::Duration> limit = ReadBoundedDuration(
        f->value, f->key, absl::Milliseconds(1), kMaxTimeLimit);
    if (!limit.ok()) return limit.status();
    spec.time_limit = *limit;
  }
  if (const Field* f = map->Find("checkpoint"); f != nullptr) {
    if (absl::Status st = ParseCheckpoint(*f, &spec); !st.ok()) return st;
  }
  if (const Field* f = map->Find("restart"); f != nullptr) {
    if (absl::Status st = ParseRetry(*f, false, &spec.restart); !st.ok()) {
      return st;
    }
  }
  if (const Field* f = map->Find("requeue"); f != nullptr) {
    if (absl::Status st = ParseRetry(*f, true, &spec.requeue); !st.ok()) {
      return st;
    }
  }
  if (const Field* f = map->Find("cancel"); f != nullptr) {
    if (absl::Status st = ParseCancel(*f, &spec); !st.ok()) return st;
  }
  if (const Field* f = map->Find("hold"); f != nullptr) {
    absl::StatusOr<bool> b = ReadBool(f->value, f->key);
    if (!b.ok()) return b.status();
    spec.hold = *b;
  }
  if (const Field* f = map->Find("labels"); f != nullptr) {
    if (absl::Status st = ReadLabels(*f, &spec.labels); !st.ok()) return st;
  }
  if (const Field* f = map->Find("node_selector"); f != nullptr) {
    if (absl::Status st = ReadLabels(*f, &spec.node_selector); !st.ok()) {
      return st;
    }
  }
  if (const Field* f = map->Find("dependency"); f != nullptr) {
    absl::StatusOr<std::string> dep = internal::ParseDependencyField(*this, *f);
    if (!dep.ok()) return dep.status();
    spec.dependency = *std::move(dep);
  }
  if (const Field* f = map->Find("kill_on_invalid_dep"); f != nullptr) {
    absl::StatusOr<bool> b = ReadBool(f->value, f->key);
    if (!b.ok()) return b.status();
    spec.kill_on_invalid_dep = *b;
  }
  if (const Field* f = map->Find("spares"); f != nullptr) {
    absl::StatusOr<int64_t> n = ReadInt(f->value, f->key, 0, kMaxSpares);
    if (!n.ok()) return n.status();
    spec.spares = static_cast<int>(*n);
  }
  if (const Field* f = map->Find("array"); f != nullptr) {
    absl::StatusOr<std::string> text = ReadText(f->value, f->key, false);
    if (!text.ok()) return text.status();
    absl::StatusOr<ArraySpec> array = ParseArraySpec(*text);
    if (!array.ok()) {
      return Error(f->value, f->key, array.status().message());
    }
    spec.array = FormatArraySpec(*array);
  }
  return spec;
}

}  // namespace

absl::StatusOr<int> ParseSignal(std::string_view name) {
  const std::string text(name);
  int number = 0;
  if (absl::SimpleAtoi(text, &number)) {
    if (number < 1 || number > MaxSignal()) {
      return absl::InvalidArgumentError(absl::StrCat("signal number ", number,
                                                     " is out of range (1 to ",
                                                     MaxSignal(), ")"));
    }
    return number;
  }
  std::string upper = absl::AsciiStrToUpper(text);
  absl::string_view bare = upper;
  absl::ConsumePrefix(&bare, "SIG");
  for (const SignalEntry& s : kSignals) {
    if (s.name == bare) return s.number;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", text,
      "' is not a signal (write a name such as SIGTERM or SIGUSR1, or a "
      "number)"));
}

std::string SignalName(int signal) {
  for (const SignalEntry& s : kSignals) {
    if (s.number == signal) return absl::StrCat("SIG", s.name);
  }
  return absl::StrCat(signal);
}

namespace {

absl::StatusOr<JobSpec> ParseSpecText(std::string_view text,
                                      std::string_view source,
                                      bool check_size) {
  const std::string source_name(source);
  JobSpecParser parser(source_name);
  absl::StatusOr<JobSpec> spec;
  absl::Status st = internal::ParseDocument(
      parser, text, check_size, "it needs at least `name` and `command`",
      [&](const YAML::Node& root) {
        spec = parser.Parse(root);
        return spec.status();
      });
  if (!st.ok()) return st;
  return spec;
}

}  // namespace

absl::StatusOr<JobSpec> ParseJobSpec(std::string_view text,
                                     std::string_view source) {
  return ParseSpecText(text, source, /*check_size=*/true);
}

absl::StatusOr<JobSpec> ParseStoredJobSpec(std::string_view text,
                                           std::string_view source) {
  return ParseSpecText(text, source, /*check_size=*/false);
}

absl::StatusOr<JobRequest> ToJobRequest(const JobSpec& spec,
                                        const Cluster& cluster, JobId id,
                                        absl::Time submit_time) {
  JobRequest job;
  job.id = id;
  job.name = spec.name;
  job.project = spec.project;
  if (!spec.user.empty()) job.user = spec.user;
  job.kind = spec.kind;
  job.preemptible = spec.preemptible;
  // Image locality (docs/scheduling.md): the digest the server pinned.
  if (spec.container.has_value()) job.image = spec.container->image_digest;
  job.node_selector = spec.node_selector;
  job.spares = spec.spares;
  job.submit_time = submit_time;
  job.time_limit = spec.time_limit.value_or(absl::InfiniteDuration());

  absl::StatusOr<int> priority =
      internal::ResolvePriority(cluster, spec.priority);
  if (!priority.ok()) return priority.status();
  job.priority = *priority;

  // GPUs and the largest node, per model.
  std::vector<int> gpus_per_model(cluster.gpu_models.size(), 0);
  std::vector<int> node_size(cluster.gpu_models.size(), 0);
  int any_node_size = 0;
  for (const NodeSpec& node : cluster.nodes) {
    if (node.gpu_model < 0 ||
        node.gpu_model >= static_cast<int>(cluster.gpu_models.size())) {
      continue;
    }
    gpus_per_model[node.gpu_model] += node.gpus;
    node_size[node.gpu_model] = std::max(node_size[node.gpu_model], node.gpus);
    any_node_size = std::max(any_node_size, node.gpus);
  }
  JobShape& shape = job.shape;
  int gpus_per_node = any_node_size;
  if (spec.gpu_model != "any") {
    const GpuModelId model = cluster.FindGpuModel(spec.gpu_model);
    if (model < 0 || gpus_per_model[model] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("resources.gpu_model: the cluster has no '",
                       spec.gpu_model, "' GPUs (it has ",
                       internal::ModelsWithGpus(cluster, gpus_per_model), ")"));
    }
    shape.gpu_model = model;
    gpus_per_node = node_size[model];
  }

  if (spec.gpus != 0) {
    if (spec.tasks != 1 || spec.gpus_per_task != 1) {
      return absl::InvalidArgumentError(
          "resources.gpus: cannot be combined with `tasks` or "
          "`resources.gpus_per_task`");
    }
    if (gpus_per_node <= 0) {
      return absl::InvalidArgumentError(
          "resources.gpus: the cluster has no nodes with GPUs");
    }
    if (spec.nodes == 0 && spec.gpus > gpus_per_node &&
        spec.gpus % gpus_per_node != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("resources.gpus: ", spec.gpus,
                       " GPUs are more than one ", gpus_per_node,
                       "-GPU node holds and not a multiple of ", gpus_per_node,
                       "; set `resources.nodes` to spread them evenly, or "
                       "ask for whole nodes"));
    }
    absl::StatusOr<JobShape> split =
        ShapeFromTotalGpus(spec.gpus, gpus_per_node, spec.nodes);
    if (!split.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("resources.", split.status().message()));
    }
    shape.tasks = split->tasks;
    shape.gpus_per_task = split->gpus_per_task;
    shape.one_task_per_node = split->one_task_per_node;
  } else {
    if (spec.nodes != 0) {
      return absl::InvalidArgumentError(
          "resources.nodes: only applies with `resources.gpus`");
    }
    shape.tasks = spec.tasks;
    shape.gpus_per_task = spec.gpus_per_task;
  }
  shape.cpus_milli_per_task = spec.cpus_milli_per_task;
  shape.memory_bytes_per_task = spec.memory_bytes_per_task;
  shape.nics_per_task = spec.nics_per_task;
  shape.slice.mig = spec.mig;
  shape.slice.share_bytes = spec.gpu_share_bytes;

  if (absl::Status st = ValidateJobRequest(job, cluster); !st.ok()) return st;
  return job;
}

std::string JobSpecToJson(const JobSpec& spec) {
  using Json = nlohmann::ordered_json;
  Json j;
  j["name"] = spec.name;
  j["project"] = spec.project;
  if (!spec.user.empty()) j["user"] = spec.user;
  j["kind"] = std::string(JobKindName(spec.kind));
  j["priority"] = spec.priority;
  j["preemptible"] = spec.preemptible;
  Json resources = Json::object();
  if (spec.gpus != 0) {
    resources["gpus"] = spec.gpus;
    if (spec.nodes != 0) resources["nodes"] = spec.nodes;
  } else {
    j["tasks"] = spec.tasks;
    resources["gpus_per_task"] = spec.gpus_per_task;
  }
  resources["gpu_model"] = spec.gpu_model;
  if (spec.cpus_milli_per_task % 1000 == 0) {
    resources["cpus_per_task"] = spec.cpus_milli_per_task / 1000;
  } else {
    resources["cpus_per_task"] =
        static_cast<double>(spec.cpus_milli_per_task) / 1000.0;
  }
  resources["memory_per_task"] = FormatBytesExact(spec.memory_bytes_per_task);
  resources["processes_per_task"] = spec.processes_per_task;
  // Only when set, so that the canonical form of whole-GPU specs stays.
  if (!spec.mig.empty()) resources["mig"] = spec.mig;
  if (spec.nics_per_task > 0) resources["nics_per_task"] = spec.nics_per_task;
  if (spec.gpu_share_bytes > 0) {
    resources["gpu_share"] = {
        {"memory", FormatBytesExact(spec.gpu_share_bytes)}};
  }

  j["resources"] = std::move(resources);
  j["command"] = spec.command;
  j["env"] = Json::object();
  for (const auto& [k, v] : spec.env) j["env"][k] = v;
  if (!spec.working_dir.empty()) j["working_dir"] = spec.working_dir;
  if (spec.container.has_value()) {
    j["container"] = internal::ContainerSpecJson(*spec.container);
  }
  // Only when set, so that the canonical form of specs without datasets is
  // what it was before them.
  if (!spec.data.empty()) j["data"] = internal::DatasetSpecsJson(spec.data);
  if (spec.time_limit.has_value() &&
      *spec.time_limit != absl::InfiniteDuration()) {
    j["time_limit"] = FormatDurationExact(*spec.time_limit);
  }
  Json checkpoint = Json::object();
  if (!spec.checkpoint.dir.empty()) checkpoint["dir"] = spec.checkpoint.dir;
  checkpoint["signal"] = SignalName(spec.checkpoint.signal);
  checkpoint["grace"] = FormatDurationExact(spec.checkpoint.grace);
  j["checkpoint"] = std::move(checkpoint);
  j["restart"] = {{"max", spec.restart.max},
                  {"backoff", FormatDurationExact(spec.restart.backoff)}};
  j["requeue"] = {{"max", spec.requeue.max < 0 ? Json("unlimited")
                                               : Json(spec.requeue.max)},
                  {"backoff", FormatDurationExact(spec.requeue.backoff)}};
  j["cancel"] = {{"signal", SignalName(spec.cancel_signal)},
                 {"grace", FormatDurationExact(spec.cancel_grace)}};
  j["hold"] = spec.hold;
  j["labels"] = Json::object();
  for (const auto& [k, v] : spec.labels) j["labels"][k] = v;
  // Only when set, so that the canonical form of specs without one is what
  // it was before selectors.
  if (!spec.node_selector.empty()) {
    j["node_selector"] = Json::object();
    for (const auto& [k, v] : spec.node_selector) j["node_selector"][k] = v;
  }
  // Likewise.
  if (!spec.dependency.empty()) j["dependency"] = spec.dependency;
  if (spec.kill_on_invalid_dep) j["kill_on_invalid_dep"] = true;
  if (!spec.array.empty()) j["array"] = spec.array;
  if (spec.spares != 0) j["spares"] = spec.spares;
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace loom