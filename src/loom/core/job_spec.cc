#include "loom/core/job_spec.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "loom/common/utf8.h"
#include "loom/core/container_spec_yaml.h"
#include "loom/core/job_array.h"
#include "loom/core/job_dependency_yaml.h"
#include "loom/core/labels.h"
#include "loom/core/yaml_util.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace loom {
namespace {

using yaml::ChildPath;
using yaml::ElementPath;
using yaml::Field;
using yaml::FormatBytesExact;
using yaml::KindOf;
using yaml::MapNode;
using yaml::ScalarText;

// Limits that keep a typo (or a hostile request) from becoming a job that
// exhausts the scheduler or the agent.
constexpr size_t kMaxSpecBytes = size_t{1} << 20;
constexpr int64_t kMaxTasks = 10000;
constexpr int64_t kMaxTotalGpus = 100000;
constexpr int64_t kMaxNodes = 10000;
constexpr int64_t kMaxCoresPerTask = 100000;
constexpr int64_t kMaxMemoryPerTask = int64_t{1} << 50;  // 1 PiB
constexpr int64_t kMaxRestarts = 1000;
constexpr int64_t kMaxRequeues = 1000000;
constexpr absl::Duration kMaxTimeLimit = absl::Hours(24 * 365);
constexpr absl::Duration kMaxGrace = absl::Hours(24);
constexpr size_t kMaxIdLength = 128;  // project, user, priority, model
constexpr size_t kMaxArgs = 4096;
constexpr size_t kMaxEnvVars = 1024;
constexpr size_t kMaxEnvNameLength = 256;
// argv plus environment of one task, as the kernel's ARG_MAX allows.
constexpr size_t kMaxArgvEnvBytes = size_t{1} << 20;
constexpr size_t kMaxLabels = 64;
constexpr size_t kMaxLabelKeyLength = 128;
constexpr size_t kMaxLabelValueLength = 256;

constexpr absl::string_view kResourceFields[] = {
    "gpus_per_task",     "gpus",          "nodes",
    "gpu_model",         "cpus_per_task", "memory_per_task",
    "processes_per_task"};

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

// True for a project, user or priority class name: printable ASCII or UTF-8
// without spaces.
bool IsValidId(absl::string_view id) {
  if (id.empty() || id.size() > kMaxIdLength) return false;
  return std::none_of(id.begin(), id.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
}

}  // namespace

bool IsValidProjectName(std::string_view name) {
  return IsValidId(absl::string_view(name.data(), name.size()));
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

namespace {

// True for a GPU model name as the cluster spec allows them, or `any`.
bool IsValidGpuModel(absl::string_view name) {
  if (name.empty() || name.size() > kMaxIdLength ||
      !absl::ascii_isalnum(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_islower(static_cast<unsigned char>(c)) ||
           absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '-' ||
           c == '_' || c == '.';
  });
}

// True for a shell identifier: [A-Za-z_][A-Za-z0-9_]*.
bool IsShellIdentifier(absl::string_view name) {
  if (name.empty() ||
      !(absl::ascii_isalpha(static_cast<unsigned char>(name[0])) ||
        name[0] == '_')) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

}  // namespace

bool IsSettableEnvName(std::string_view name) {
  const absl::string_view n(name.data(), name.size());
  if (n.size() > kMaxEnvNameLength || !IsShellIdentifier(n)) return false;
  // LOOM_FAKE_SECONDS is the one LOOM_ name a job sets: how long its tasks
  // last on agents that run fake tasks (docs/agent.md).
  if (absl::StartsWith(n, "LOOM_") && n != "LOOM_FAKE_SECONDS") return false;
  return std::find(std::begin(kReservedEnv), std::end(kReservedEnv), n) ==
         std::end(kReservedEnv);
}

namespace {

// Rounds a duration to the nearest millisecond.
absl::Duration RoundToMillis(absl::Duration d) {
  if (d == absl::InfiniteDuration() || d == -absl::InfiniteDuration()) {
    return d;
  }
  return absl::Floor(d + absl::Microseconds(500), absl::Milliseconds(1));
}

// Writes a duration exactly (to the millisecond) in the largest unit that
// divides it: "2m", "12h", "1500ms".
std::string FormatDurationExact(absl::Duration d) {
  const int64_t ms = absl::ToInt64Milliseconds(RoundToMillis(d));
  if (ms <= 0) return "0s";
  struct Unit {
    int64_t ms;
    absl::string_view suffix;
  };
  constexpr Unit kUnits[] = {
      {86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
  for (const Unit& u : kUnits) {
    if (ms % u.ms == 0) return absl::StrCat(ms / u.ms, u.suffix);
  }
  return absl::StrCat(ms, "ms");
}

// A 0-based position in `text`, as yaml-cpp marks count (bytes).
YAML::Mark MarkAt(std::string_view text, size_t offset) {
  YAML::Mark mark;
  mark.pos = static_cast<int>(offset);
  mark.line = 0;
  mark.column = 0;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++mark.line;
      mark.column = 0;
    } else {
      ++mark.column;
    }
  }
  return mark;
}

// True when the first thing in `text` other than white space is '{', i.e.
// the document is a JSON object (or a YAML flow map).
bool LooksLikeJson(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{';
}

bool IsHex(char c) {
  return absl::ascii_isxdigit(static_cast<unsigned char>(c));
}

// The value of four hex digits (checked by the caller).
uint32_t Hex4(std::string_view digits) {
  uint32_t v = 0;
  for (char c : digits) {
    const auto u = static_cast<unsigned char>(c);
    v = v * 16 +
        (absl::ascii_isdigit(u) ? u - '0' : absl::ascii_tolower(u) - 'a' + 10);
  }
  return v;
}

// JSON writes characters outside the Basic Multilingual Plane as a pair of
// UTF-16 escapes ("\ud83d\ude00"), which YAML does not read; rewrites each
// pair into YAML's "\U0001f600". Other escapes are copied unchanged.
std::string JoinSurrogateEscapes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '\\' || i + 1 >= text.size()) {
      out.push_back(text[i++]);
      continue;
    }
    if (text[i + 1] == 'u' && i + 12 <= text.size() && text[i + 6] == '\\' &&
        text[i + 7] == 'u' &&
        std::all_of(text.begin() + i + 2, text.begin() + i + 6, IsHex) &&
        std::all_of(text.begin() + i + 8, text.begin() + i + 12, IsHex)) {
      const uint32_t high = Hex4(text.substr(i + 2, 4));
      const uint32_t low = Hex4(text.substr(i + 8, 4));
      if (high >= 0xd800 && high <= 0xdbff && low >= 0xdc00 && low <= 0xdfff) {
        const uint32_t cp = 0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00);
        char buf[16];
        std::snprintf(buf, sizeof(buf), "\\U%08x", cp);
        out += buf;
        i += 12;
        continue;
      }
    }
    // Copy the escape as a unit so that "\\" never starts another one.
    out.push_back(text[i]);
    out.push_back(text[i + 1]);
    i += 2;
  }
  return out;
}

// Turns a job spec document into a `JobSpec`. Every method returns
// InvalidArgument with "<source>:<line>:<column>: <path>: <reason>" on bad
// input. yaml-cpp exceptions are caught by the caller of `Parse`.
class JobSpecParser : public yaml::Reader {
 public:
  // `source` must outlive the parser.
  explicit JobSpecParser(absl::string_view source) : yaml::Reader(source) {}

  // Checks the raw bytes: size (unless `check_size` is false), UTF-8, no
  // control characters.
  absl::Status CheckText(std::string_view text, bool check_size = true) const;

  absl::StatusOr<JobSpec> Parse(const YAML::Node& root);

 private:
  // A scalar as text, without NUL characters; empty only if `allow_empty`.
  absl::StatusOr<std::string> ReadText(const YAML::Node& node,
                                       absl::string_view path,
                                       bool allow_empty) const;
  // A project, user, priority class name.
  absl::StatusOr<std::string> ReadId(const YAML::Node& node,
                                     absl::string_view path) const;
  // An absolute path.
  absl::StatusOr<std::string> ReadPath(const YAML::Node& node,
                                       absl::string_view path) const;
  // A signal a process can catch (so not SIGKILL or SIGSTOP).
  absl::StatusOr<int> ReadSignal(const YAML::Node& node,
                                 absl::string_view path) const;
  // A duration in [min, max], rounded to the millisecond.
  absl::StatusOr<absl::Duration> ReadBoundedDuration(const YAML::Node& node,
                                                     absl::string_view path,
                                                     absl::Duration min,
                                                     absl::Duration max) const;
  // Reads a map like `ReadMap` and rejects fields without a value
  // ("command:" and nothing after it), pointing at the field's name.
  absl::StatusOr<MapNode> ReadFields(
      const YAML::Node& node, std::string path,
      std::initializer_list<absl::string_view> allowed) const;
  // Counts `bytes` against the argv + environment budget of a task.
  absl::Status ChargeArgvEnv(const YAML::Node& node, absl::string_view path,
                             size_t bytes);

  absl::Status ParseResources(const Field& field, const Field* tasks,
                              JobSpec* spec) const;
  absl::Status ParseCommand(const Field& field, JobSpec* spec);
  absl::Status ParseEnv(const Field& field, JobSpec* spec);
  // A map of label names to strings: a job's `labels`, or its
  // `node_selector` (where an empty value means "any value").
  absl::Status ParseLabels(const Field& field,
                           std::map<std::string, std::string>* out) const;
  absl::Status ParseCheckpoint(const Field& field, JobSpec* spec) const;
  // `restart` and `requeue`: {max, backoff}; `requeue.max` may also be
  // "unlimited" (-1).
  absl::Status ParseRetry(const Field& field, bool requeue,
                          RestartSpec* out) const;
  absl::Status ParseCancel(const Field& field, JobSpec* spec) const;

  size_t argv_env_bytes_ = 0;
};

absl::Status JobSpecParser::CheckText(std::string_view text,
                                      bool check_size) const {
  if (check_size && text.size() > kMaxSpecBytes) {
    return Error(
        YAML::Mark(), "",
        absl::StrCat("the job spec is ", text.size(), " bytes; at most ",
                     kMaxSpecBytes, " are accepted"));
  }
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
      return Error(MarkAt(text, i), "",
                   absl::StrCat("the control character 0x",
                                absl::Hex(c, absl::kZeroPad2),
                                " is not allowed in a spec (write it as an "
                                "escape inside double quotes)"));
    }
    const size_t n = Utf8CharLength(text, i);
    if (n == 0) {
      return Error(MarkAt(text, i), "", "the spec is not valid UTF-8 text");
    }
    i += n;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> JobSpecParser::ReadText(const YAML::Node& node,
                                                    absl::string_view path,
                                                    bool allow_empty) const {
  if (!node.IsScalar()) {
    return Error(node, path,
                 absl::StrCat("must be a string, got ", KindOf(node)));
  }
  std::string s = ScalarText(node);
  if (s.empty() && !allow_empty) {
    return Error(node, path, "must not be empty");
  }
  if (s.find('\0') != std::string::npos) {
    return Error(node, path, "must not contain NUL characters");
  }
  return s;
}

absl::StatusOr<std::string> JobSpecParser::ReadId(
    const YAML::Node& node, absl::string_view path) const {
  absl::StatusOr<std::string> id = ReadText(node, path, false);
  if (!id.ok()) return id.status();
  if (!IsValidId(*id)) {
    return Error(
        node, path,
        absl::StrCat("'", *id, "' is not a valid name (at most ", kMaxIdLength,
                     " characters, no spaces or control characters)"));
  }
  return id;
}

absl::StatusOr<std::string> JobSpecParser::ReadPath(
    const YAML::Node& node, absl::string_view path) const {
  absl::StatusOr<std::string> p = ReadText(node, path, false);
  if (!p.ok()) return p.status();
  if ((*p)[0] != '/') {
    return Error(node, path,
                 absl::StrCat("must be an absolute path, got '", *p, "'"));
  }
  if (p->size() > kMaxPathLength) {
    return Error(node, path,
                 absl::StrCat("is longer than ", kMaxPathLength, " bytes"));
  }
  return p;
}

absl::StatusOr<int> JobSpecParser::ReadSignal(const YAML::Node& node,
                                              absl::string_view path) const {
  if (!node.IsScalar()) {
    return Error(
        node, path,
        absl::StrCat("must be a signal such as SIGTERM, got ", KindOf(node)));
  }
  absl::StatusOr<int> signal = ParseSignal(node.Scalar());
  if (!signal.ok()) return Error(node, path, signal.status().message());
  if (*signal == SIGKILL || *signal == SIGSTOP) {
    return Error(node, path,
                 absl::StrCat(SignalName(*signal),
                              " cannot be caught, so the job would get no "
                              "warning; loom sends SIGKILL itself when the "
                              "grace period ends (set grace: 0s to skip it)"));
  }
  return signal;
}

absl::StatusOr<absl::Duration> JobSpecParser::ReadBoundedDuration(
    const YAML::Node& node, absl::string_view path, absl::Duration min,
    absl::Duration max) const {
  absl::StatusOr<absl::Duration> d = ReadDuration(node, path);
  if (!d.ok()) return d.status();
  const absl::Duration rounded = RoundToMillis(*d);
  if (rounded < min) {
    return Error(
        node, path,
        min == absl::Milliseconds(1)
            ? std::string("must be at least 1ms")
            : absl::StrCat("must be at least ", FormatDurationExact(min)));
  }
  if (rounded > max) {
    return Error(node, path,
                 absl::StrCat("must be at most ", FormatDurationExact(max),
                              ", got '", node.Scalar(), "'"));
  }
  return rounded;
}

absl::StatusOr<MapNode> JobSpecParser::ReadFields(
    const YAML::Node& node, std::string path,
    std::initializer_list<absl::string_view> allowed) const {
  absl::StatusOr<MapNode> map = ReadMap(node, std::move(path), allowed);
  if (!map.ok()) return map.status();
  for (const Field& f : map->fields) {
    if (f.value.IsNull()) {
      return Error(f.key_node, ChildPath(map->path, f.key),
                   "has no value (write \"\" for an empty string)");
    }
  }
  return map;
}

absl::Status JobSpecParser::ChargeArgvEnv(const YAML::Node& node,
                                          absl::string_view path,
                                          size_t bytes) {
  argv_env_bytes_ += bytes;
  if (argv_env_bytes_ > kMaxArgvEnvBytes) {
    return Error(node, path,
                 absl::StrCat("the command and env of a task take more than ",
                              kMaxArgvEnvBytes, " bytes together"));
  }
  return absl::OkStatus();
}

absl::Status JobSpecParser::ParseResources(const Field& field,
                                           const Field* tasks,
                                           JobSpec* spec) const {
  absl::StatusOr<MapNode> map =
      ReadFields(field.value, field.key,
                 {"gpus_per_task", "gpus", "nodes", "gpu_model",
                  "cpus_per_task", "memory_per_task", "processes_per_task"});
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
    const std::string path = ChildPath(map->path, "gpu_model");
    absl::StatusOr<std::string> model = ReadText(f->value, path, false);
    if (!model.ok()) return model.status();
    const std::string lower = absl::AsciiStrToLower(*model);
    if (!IsValidGpuModel(lower)) {
      return Error(f->value, path,
                   absl::StrCat("'", *model,
                                "' is not a GPU model name (e.g. h200, a100 "
                                "or any)"));
    }
    spec->gpu_model = lower;
  }
  if (const Field* f = map->Find("cpus_per_task"); f != nullptr) {
    const std::string path = ChildPath(map->path, "cpus_per_task");
    absl::StatusOr<double> cpus = ReadNumber(f->value, path);
    if (!cpus.ok()) return cpus.status();
    if (*cpus < 0) {
      return Error(
          f->value, path,
          absl::StrCat("must not be negative, got ", f->value.Scalar()));
    }
    if (*cpus > kMaxCoresPerTask) {
      return Error(f->value, path,
                   absl::StrCat("must be at most ", kMaxCoresPerTask,
                                " cores, got ", f->value.Scalar()));
    }
    const int64_t milli = std::llround(*cpus * 1000);
    if (milli == 0 && *cpus > 0) {
      return Error(f->value, path,
                   absl::StrCat("must be 0 or at least 0.001 cores, got ",
                                f->value.Scalar()));
    }
    spec->cpus_milli_per_task = milli;
  }
  if (const Field* f = map->Find("memory_per_task"); f != nullptr) {
    const std::string path = ChildPath(map->path, "memory_per_task");
    absl::StatusOr<int64_t> bytes = ReadBytes(f->value, path, 0);
    if (!bytes.ok()) return bytes.status();
    if (*bytes > kMaxMemoryPerTask) {
      return Error(
          f->value, path,
          absl::StrCat("must be at most 1Pi, got ", f->value.Scalar()));
    }
    spec->memory_bytes_per_task = *bytes;
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

absl::Status JobSpecParser::ParseCommand(const Field& field, JobSpec* spec) {
  const std::string& path = field.key;
  const YAML::Node& node = field.value;
  if (node.IsScalar()) {
    absl::StatusOr<std::string> script = ReadText(node, path, false);
    if (!script.ok()) return script.status();
    if (absl::StripAsciiWhitespace(*script).empty()) {
      return Error(node, path, "must not be blank");
    }
    if (absl::Status st = ChargeArgvEnv(node, path, script->size() + 12);
        !st.ok()) {
      return st;
    }
    spec->command = {"/bin/sh", "-c", *std::move(script)};
    return absl::OkStatus();
  }
  if (!node.IsSequence()) {
    return Error(node, path,
                 absl::StrCat("must be a list of strings or one string (run "
                              "by /bin/sh -c), got ",
                              KindOf(node)));
  }
  absl::StatusOr<std::vector<YAML::Node>> items =
      ReadList(node, path, /*allow_empty=*/false);
  if (!items.ok()) return items.status();
  if (items->size() > kMaxArgs) {
    return Error(node, path,
                 absl::StrCat("has ", items->size(), " arguments; at most ",
                              kMaxArgs, " are allowed"));
  }
  std::vector<std::string> argv;
  for (size_t i = 0; i < items->size(); ++i) {
    const std::string item_path = ElementPath(path, i);
    if ((*items)[i].IsNull()) {
      const YAML::Mark mark =
          (*items)[i].Mark().line >= 0 ? (*items)[i].Mark() : node.Mark();
      return Error(mark, item_path,
                   "has no value (write \"\" for an empty "
                   "argument)");
    }
    absl::StatusOr<std::string> arg =
        ReadText((*items)[i], item_path, /*allow_empty=*/i > 0);
    if (!arg.ok()) return arg.status();
    if (absl::Status st =
            ChargeArgvEnv((*items)[i], item_path, arg->size() + 1);
        !st.ok()) {
      return st;
    }
    argv.push_back(*std::move(arg));
  }
  spec->command = std::move(argv);
  return absl::OkStatus();
}

absl::Status JobSpecParser::ParseEnv(const Field& field, JobSpec* spec) {
  const std::string& path = field.key;
  const YAML::Node& node = field.value;
  if (!node.IsMap()) {
    return Error(
        node, path,
        absl::StrCat("must be a map of NAME: value, got ", KindOf(node)));
  }
  std::map<std::string, int> lines;  // name -> 1-based line
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key = it->first;
    const YAML::Node value = it->second;
    if (!key.IsScalar()) {
      return Error(key, path, "variable names must be plain strings");
    }
    const std::string& name = key.Scalar();
    const std::string var_path = ChildPath(path, name);
    if (!IsSettableEnvName(name)) {
      if (name.size() > kMaxEnvNameLength || !IsShellIdentifier(name)) {
        return Error(
            key, var_path,
            absl::StrCat("'", name,
                         "' is not a valid variable name (letters, "
                         "digits and '_', not starting with a digit)"));
      }
      return Error(key, var_path,
                   "is set by loom for every task and cannot be overridden");
    }
    if (auto prior = lines.find(name); prior != lines.end()) {
      return Error(
          key, var_path,
          absl::StrCat("given twice (first on line ", prior->second, ")"));
    }
    lines.emplace(name, key.Mark().line + 1);
    if (lines.size() > kMaxEnvVars) {
      return Error(key, var_path,
                   absl::StrCat("more than ", kMaxEnvVars, " variables"));
    }
    if (value.IsNull()) {
      return Error(value.Mark().line >= 0 ? value.Mark() : key.Mark(), var_path,
                   "has no value (write \"\" for an empty one)");
    }
    absl::StatusOr<std::string> text =
        ReadText(value, var_path, /*allow_empty=*/true);
    if (!text.ok()) return text.status();
    if (absl::Status st =
            ChargeArgvEnv(value, var_path, name.size() + text->size() + 2);
        !st.ok()) {
      return st;
    }
    spec->env[name] = *std::move(text);
  }
  return absl::OkStatus();
}

absl::Status JobSpecParser::ParseLabels(
    const Field& field, std::map<std::string, std::string>* out) const {
  const std::string& path = field.key;
  const YAML::Node& node = field.value;
  if (!node.IsMap()) {
    return Error(node, path,
                 absl::StrCat("must be a map of strings, got ", KindOf(node)));
  }
  std::map<std::string, int> lines;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key = it->first;
    const YAML::Node value = it->second;
    if (!key.IsScalar()) {
      return Error(key, path, "label names must be plain strings");
    }
    const std::string& name = key.Scalar();
    const std::string label_path = ChildPath(path, name);
    if (!IsValidLabelKey(name)) {
      return Error(
          key, label_path,
          absl::StrCat("'", name, "' is not a valid label name (at most ",
                       kMaxLabelKeyLength,
                       " letters, digits, '-', '_', '.', '/', "
                       "starting with a letter or digit)"));
    }
    if (auto prior = lines.find(name); prior != lines.end()) {
      return Error(
          key, label_path,
          absl::StrCat("given twice (first on line ", prior->second, ")"));
    }
    lines.emplace(name, key.Mark().line + 1);
    if (lines.size() > kMaxLabels) {
      return Error(key, label_path,
                   absl::StrCat("more than ", kMaxLabels, " labels"));
    }
    if (value.IsNull()) {
      return Error(value.Mark().line >= 0 ? value.Mark() : key.Mark(),
                   label_path, "has no value (write \"\" for an empty one)");
    }
    absl::StatusOr<std::string> text =
        ReadText(value, label_path, /*allow_empty=*/true);
    if (!text.ok()) return text.status();
    if (text->size() > kMaxLabelValueLength) {
      return Error(
          value, label_path,
          absl::StrCat("is longer than ", kMaxLabelValueLength, " bytes"));
    }
    (*out)[name] = *std::move(text);
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
                            "array",       "spares"});
  if (!map.ok()) return map.status();

  JobSpec spec;
  absl::StatusOr<const Field*> name_field = Require(*map, "name");
  if (!name_field.ok()) return name_field.status();
  absl::StatusOr<std::string> name =
      ReadText((*name_field)->value, "name", false);
  if (!name.ok()) return name.status();
  if (!IsValidJobName(*name)) {
    return Error((*name_field)->value, "name",
                 absl::StrCat("'", *name,
                              "' is not a valid job name (1 to 63 lower-case "
                              "letters, digits and '-', starting with a "
                              "letter)"));
  }
  spec.name = *std::move(name);

  if (const Field* f = map->Find("project"); f != nullptr) {
    absl::StatusOr<std::string> project = ReadId(f->value, f->key);
    if (!project.ok()) return project.status();
    spec.project = *std::move(project);
  }
  if (const Field* f = map->Find("user"); f != nullptr) {
    absl::StatusOr<std::string> user = ReadText(f->value, f->key, false);
    if (!user.ok()) return user.status();
    if (!IsValidUserName(*user)) {
      return Error(f->value, f->key,
                   absl::StrCat("'", *user, "' is not a valid user name (1 to ",
                                kMaxUserNameLength,
                                " letters, digits, '_', '.', '-', '@', "
                                "starting with a letter, digit or '_')"));
    }
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
  if (absl::Status st = ParseCommand(**command, &spec); !st.ok()) return st;
  if (const Field* f = map->Find("env"); f != nullptr) {
    if (absl::Status st = ParseEnv(*f, &spec); !st.ok()) return st;
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
    if (absl::Status st = ParseLabels(*f, &spec.labels); !st.ok()) return st;
  }
  if (const Field* f = map->Find("node_selector"); f != nullptr) {
    if (absl::Status st = ParseLabels(*f, &spec.node_selector); !st.ok()) {
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

// The models that have GPUs in `cluster`, for error messages.
std::string ModelsWithGpus(const Cluster& cluster,
                           const std::vector<int>& gpus_per_model) {
  std::vector<std::string> names;
  for (size_t m = 0; m < cluster.gpu_models.size(); ++m) {
    if (gpus_per_model[m] > 0) names.push_back(cluster.gpu_models[m].name);
  }
  return names.empty() ? std::string("none") : absl::StrJoin(names, ", ");
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
  if (absl::Status st = parser.CheckText(text, check_size); !st.ok()) {
    return st;
  }
  const std::string document =
      LooksLikeJson(text) ? JoinSurrogateEscapes(text) : std::string(text);
  try {
    absl::StatusOr<YAML::Node> root = parser.LoadDocument(document);
    if (!root.ok()) return root.status();
    if (root->IsNull()) {
      return parser.Error(
          YAML::Mark(), "",
          "the job spec is empty; it needs at least `name` and `command`");
    }
    return parser.Parse(*root);
  } catch (const YAML::Exception& e) {
    return parser.LoadError(document, e);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat(source_name, ": reading the job spec failed: ", e.what()));
  }
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

  const PriorityClass* priority = cluster.FindPriorityClass(spec.priority);
  if (priority == nullptr) {
    std::vector<std::string> names;
    for (const PriorityClass& pc : cluster.priority_classes) {
      names.push_back(pc.name);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("priority: the cluster has no priority class '",
                     spec.priority, "' (it has ",
                     names.empty() ? "none" : absl::StrJoin(names, ", "), ")"));
  }
  job.priority = priority->value;

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
      return absl::InvalidArgumentError(absl::StrCat(
          "resources.gpu_model: the cluster has no '", spec.gpu_model,
          "' GPUs (it has ", ModelsWithGpus(cluster, gpus_per_model), ")"));
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

  j["resources"] = std::move(resources);
  j["command"] = spec.command;
  j["env"] = Json::object();
  for (const auto& [k, v] : spec.env) j["env"][k] = v;
  if (!spec.working_dir.empty()) j["working_dir"] = spec.working_dir;
  if (spec.container.has_value()) {
    j["container"] = internal::ContainerSpecJson(*spec.container);
  }
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
