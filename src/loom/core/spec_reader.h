#pragma once

// The pieces that the job spec parser (job_spec.cc) and the service spec
// parser (service_spec.cc) share: the checks of the raw text, loading the
// one document, and the typed reads of the fields both kinds of spec have
// (names, paths, signals, durations, `command`, `env`, `labels`). Internal
// to `core`, like yaml_util.h: yaml-cpp is a private dependency of
// `loom_core`, so no public header may include this one.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "loom/core/cluster.h"
#include "loom/core/yaml_util.h"
#include "yaml-cpp/yaml.h"

namespace loom::internal {

// Limits that keep a typo (or a hostile request) from becoming a spec that
// exhausts the scheduler or the agent.
inline constexpr size_t kMaxSpecBytes = size_t{1} << 20;
inline constexpr size_t kMaxSpecIdLength = 128;  // project, user, priority
inline constexpr size_t kMaxArgs = 4096;
inline constexpr size_t kMaxEnvVars = 1024;
inline constexpr size_t kMaxEnvNameLength = 256;
// argv plus environment of one task, as the kernel's ARG_MAX allows.
inline constexpr size_t kMaxArgvEnvBytes = size_t{1} << 20;
inline constexpr size_t kMaxLabels = 64;
inline constexpr size_t kMaxLabelKeyLength = 128;
inline constexpr size_t kMaxLabelValueLength = 256;
inline constexpr int64_t kMaxCoresPerTask = 100000;
inline constexpr int64_t kMaxMemoryPerTask = int64_t{1} << 50;  // 1 PiB
// The longest grace period or backoff a spec may ask for.
inline constexpr absl::Duration kMaxGrace = absl::Hours(24);

// True for a project, user or priority class name: 1 to
// `kMaxSpecIdLength` bytes of printable ASCII or UTF-8 without spaces.
bool IsValidSpecId(absl::string_view id);

// True for a shell identifier: [A-Za-z_][A-Za-z0-9_]*.
bool IsShellIdentifier(absl::string_view name);

// True for a GPU model name as the cluster spec allows them, or `any`:
// lower-case letters, digits, '-', '_', '.', starting with a letter or digit.
bool IsValidGpuModelName(absl::string_view name);

// Rounds a duration to the nearest millisecond (infinities stay).
absl::Duration RoundToMillis(absl::Duration d);

// Writes a duration exactly (to the millisecond) in the largest unit that
// divides it: "2m", "12h", "1500ms"; "0s" for zero or less.
std::string FormatDurationExact(absl::Duration d);

// The value of a spec's priority class in `cluster`, or InvalidArgument
// "priority: the cluster has no priority class 'urgent' (it has low,
// normal, high)".
absl::StatusOr<int> ResolvePriority(const Cluster& cluster,
                                    std::string_view name);

// The models that have GPUs in `cluster`, for error messages: "h200, a100"
// or "none". `gpus_per_model` is indexed by model id.
std::string ModelsWithGpus(const Cluster& cluster,
                           const std::vector<int>& gpus_per_model);

// Reads the fields that job and service specs share. Every method returns
// InvalidArgument with "<source>:<line>:<column>: <path>: <reason>" on bad
// input; none throws itself, but yaml-cpp may while nodes are read, so
// parsing runs inside `ParseDocument`. One reader per document: it counts
// the bytes of `command` and `env` (`ChargeArgvEnv`). Thread-compatible.
class SpecReader : public yaml::Reader {
 public:
  // `source` names the document in messages; `what` names the kind of spec
  // in them ("job" gives "the job spec is empty; ..."). Both must outlive
  // the reader.
  SpecReader(absl::string_view source, absl::string_view what)
      : yaml::Reader(source), what_(what) {}

  absl::string_view what() const { return what_; }

  // Checks the raw bytes: size (unless `check_size` is false), UTF-8, no
  // control characters other than tab, newline and carriage return.
  absl::Status CheckText(std::string_view text, bool check_size = true) const;

  // A scalar as text, without NUL characters; empty only if `allow_empty`.
  absl::StatusOr<std::string> ReadText(const YAML::Node& node,
                                       absl::string_view path,
                                       bool allow_empty) const;
  // A project or priority class name (`IsValidSpecId`).
  absl::StatusOr<std::string> ReadId(const YAML::Node& node,
                                     absl::string_view path) const;
  // A user name (`IsValidUserName`, loom/core/job_spec.h).
  absl::StatusOr<std::string> ReadUser(const YAML::Node& node,
                                       absl::string_view path) const;
  // A job or service name (`IsValidJobName`); the message calls it a
  // "<what> name".
  absl::StatusOr<std::string> ReadName(const YAML::Node& node,
                                       absl::string_view path) const;
  // An absolute path of at most `kMaxPathLength` bytes.
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
  absl::StatusOr<yaml::MapNode> ReadFields(
      const YAML::Node& node, std::string path,
      std::initializer_list<absl::string_view> allowed) const;
  // A GPU model name or `any` (`IsValidGpuModelName`), read in lower case.
  absl::StatusOr<std::string> ReadGpuModel(const YAML::Node& node,
                                           absl::string_view path) const;
  // A number of CPU cores from 0 to `kMaxCoresPerTask`, in thousandths of a
  // core (0, or at least 0.001).
  absl::StatusOr<int64_t> ReadCpusMilli(const YAML::Node& node,
                                        absl::string_view path) const;
  // A byte quantity from 0 to `kMaxMemoryPerTask` (1Pi).
  absl::StatusOr<int64_t> ReadMemory(const YAML::Node& node,
                                     absl::string_view path) const;
  // Counts `bytes` against the argv + environment budget of a task.
  absl::Status ChargeArgvEnv(const YAML::Node& node, absl::string_view path,
                             size_t bytes);

  // `command`: a list of strings (the argv), or one string, run as
  // {"/bin/sh", "-c", string}.
  absl::Status ReadCommand(const yaml::Field& field,
                           std::vector<std::string>* argv);
  // `env`: a map of settable names (`IsSettableEnvName`, and none of
  // `reserved`, which loom sets for this kind of spec) to strings.
  absl::Status ReadEnv(const yaml::Field& field,
                       std::span<const absl::string_view> reserved,
                       std::map<std::string, std::string>* env);
  // A map of label names to strings: `labels`, or `node_selector` (where an
  // empty value means "any value").
  absl::Status ReadLabels(const yaml::Field& field,
                          std::map<std::string, std::string>* out) const;

 private:
  absl::string_view what_;
  size_t argv_env_bytes_ = 0;
};

// Reads one spec document: checks `text` (`CheckText`), loads its one
// document (JSON's surrogate-pair escapes joined first, which YAML does not
// read) and calls `parse` with the root, inside one try block, so that
// anything yaml-cpp throws becomes an error naming where it happened. An
// empty document gives "<source>:1:1: the <what> spec is empty; <hint>".
absl::Status ParseDocument(
    const SpecReader& reader, std::string_view text, bool check_size,
    absl::string_view empty_hint,
    absl::FunctionRef<absl::Status(const YAML::Node&)> parse);

}  // namespace loom::internal
