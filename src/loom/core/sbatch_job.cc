#include "loom/core/sbatch_job.h"

#include <climits>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "loom/common/utf8.h"
#include "loom/core/container_spec.h"
#include "loom/core/job_array.h"
#include "loom/core/job_dependency.h"
#include "loom/core/labels.h"

namespace loom {
// A named namespace rather than an anonymous one: in a unity build this file
// shares a translation unit with the rest of loom_core.
namespace sbatch_job_internal {

// The flags of `loom _batch` other than --script, in the order
// `BatchInvocationArgv` writes them. Exactly one member pointer is set.
struct BatchFlag {
  const char* name;  // without "--"
  int BatchInvocation::*number = nullptr;
  std::optional<int> BatchInvocation::*optional_number = nullptr;
  std::string BatchInvocation::*text = nullptr;
  bool always = false;  // a text flag written even when empty
};

constexpr BatchFlag kBatchFlags[] = {
    {.name = "ntasks", .number = &BatchInvocation::ntasks},
    {.name = "ntasks-per-node",
     .optional_number = &BatchInvocation::ntasks_per_node},
    {.name = "cpus-per-task",
     .optional_number = &BatchInvocation::cpus_per_task},
    {.name = "gpus-per-node",
     .optional_number = &BatchInvocation::gpus_per_node},
    {.name = "job-name", .text = &BatchInvocation::job_name, .always = true},
    {.name = "submit-dir",
     .text = &BatchInvocation::submit_dir,
     .always = true},
    {.name = "submit-host",
     .text = &BatchInvocation::submit_host,
     .always = true},
    {.name = "account", .text = &BatchInvocation::account, .always = true},
    {.name = "partition", .text = &BatchInvocation::partition},
    {.name = "output", .text = &BatchInvocation::output, .always = true},
    {.name = "error", .text = &BatchInvocation::error},
};

absl::Status BatchError(const std::string& message) {
  return absl::InvalidArgumentError("loom _batch: " + message);
}

absl::Status SbatchError(const std::string& message) {
  return absl::InvalidArgumentError("sbatch: " + message);
}

std::string Quoted(std::string_view s) {
  return absl::StrCat("'", std::string(s), "'");
}

// A positive decimal number that fits an int; digits only.
std::optional<int> PositiveNumber(const std::string& s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v <= 0 || v > INT_MAX) return std::nullopt;
  return static_cast<int>(v);
}

bool IsIdentifier(std::string_view name) {
  if (name.empty() || absl::ascii_isdigit(static_cast<unsigned char>(name[0])))
    return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') {
      return false;
    }
  }
  return true;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The job's shape: nodes, tasks and GPUs per node.
struct SbatchShape {
  int nodes = 1;
  int ntasks = 1;
  int gpus_per_node = 0;
  std::string gpu_type;
};

absl::StatusOr<SbatchShape> ShapeOf(const SbatchOptions& o,
                                    const SbatchContext& ctx,
                                    std::vector<std::string>* warnings) {
  for (const auto& [value, option] :
       {std::pair{o.nodes, "-N/--nodes"},
        {o.ntasks, "-n/--ntasks"},
        {o.ntasks_per_node, "--ntasks-per-node"}}) {
    if (value && *value < 1) {
      return SbatchError(
          absl::StrCat(option, ": must be at least 1, got ", *value));
    }
  }
  SbatchShape s;
  const int64_t per_node = o.ntasks_per_node.value_or(1);
  int64_t nodes = 1;
  if (o.nodes) {
    nodes = *o.nodes;
    if (o.nodes_max && *o.nodes_max > *o.nodes) {
      warnings->push_back(
          absl::StrCat("-N/--nodes ", *o.nodes, "-", *o.nodes_max,
                       ": loom allocates exactly ", *o.nodes, " nodes"));
    }
  } else if (o.ntasks && o.ntasks_per_node) {
    nodes = CeilDiv(*o.ntasks, *o.ntasks_per_node);
  }
  const int64_t ntasks = o.ntasks ? *o.ntasks : nodes * per_node;
  if (ntasks > INT_MAX) {
    return SbatchError(absl::StrCat("-n/--ntasks: ", nodes, " nodes x ",
                                    per_node, " tasks is too many tasks"));
  }
  if (ntasks < nodes) {
    return SbatchError(absl::StrCat("-n/--ntasks ", ntasks,
                                    " is fewer tasks than -N/--nodes ", nodes,
                                    " (every node runs at least one)"));
  }
  if (o.ntasks_per_node && ntasks > nodes * per_node) {
    return SbatchError(
        absl::StrCat("-n/--ntasks ", ntasks, " is more than -N/--nodes ", nodes,
                     " x --ntasks-per-node ", per_node, " tasks"));
  }
  s.nodes = static_cast<int>(nodes);
  s.ntasks = static_cast<int>(ntasks);

  std::vector<const char*> given;
  if (o.gpus) given.push_back("-G/--gpus");
  if (o.gpus_per_node) given.push_back("--gpus-per-node/--gres");
  if (o.gpus_per_task) given.push_back("--gpus-per-task");
  if (given.size() > 1) {
    return SbatchError(absl::StrCat(
        given[0], " and ", given[1],
        " cannot be combined: give the GPUs one way (loom gives every node "
        "the same number)"));
  }
  for (const auto& [g, option] : {std::pair{o.gpus, "-G/--gpus"},
                                  {o.gpus_per_node, "--gpus-per-node/--gres"},
                                  {o.gpus_per_task, "--gpus-per-task"}}) {
    if (g && g->count < 1) {
      return SbatchError(
          absl::StrCat(option, ": must be at least 1, got ", g->count));
    }
  }
  const bool whole_node = o.exclusive.value_or(false) && ctx.node_gpus > 0;
  int64_t g = 0;
  if (o.gpus_per_node) {
    g = o.gpus_per_node->count;
    s.gpu_type = o.gpus_per_node->type;
  } else if (o.gpus) {
    if (o.gpus->count % nodes != 0) {
      return SbatchError(absl::StrCat("-G/--gpus ", o.gpus->count,
                                      " cannot be spread evenly over ", nodes,
                                      " nodes"));
    }
    g = o.gpus->count / nodes;
    s.gpu_type = o.gpus->type;
  } else if (o.gpus_per_task) {
    if (ntasks % nodes != 0) {
      return SbatchError(absl::StrCat("--gpus-per-task: ", ntasks,
                                      " tasks cannot be spread evenly over ",
                                      nodes, " nodes"));
    }
    g = int64_t{o.gpus_per_task->count} * (ntasks / nodes);
    s.gpu_type = o.gpus_per_task->type;
  } else if (whole_node) {
    g = ctx.node_gpus;
  } else {
    return SbatchError(
        "the job asks for no GPUs; give -G/--gpus, --gpus-per-node/--gres or "
        "--gpus-per-task (loom allocates GPUs and every job needs one)");
  }
  if (whole_node && g < ctx.node_gpus) {
    warnings->push_back(absl::StrCat("--exclusive: each node's ", g,
                                     " GPUs become all ", ctx.node_gpus,
                                     " GPUs of the node"));
    g = ctx.node_gpus;
  }
  if (g * nodes > INT_MAX) {
    return SbatchError(
        absl::StrCat(nodes, " nodes x ", g, " GPUs is too many GPUs"));
  }
  s.gpus_per_node = static_cast<int>(g);
  return s;
}

// -C: terms joined by '&' into `selector`, checked against -p.
absl::Status AddConstraint(const std::string& text,
                           const std::optional<std::string>& partition,
                           std::map<std::string, std::string>* selector) {
  const std::string option = "-C/--constraint: ";
  for (const char c : std::string_view("|[]*,")) {
    if (text.find(c) != std::string::npos) {
      return SbatchError(absl::StrCat(
          option, Quoted(text), ": '", std::string(1, c),
          "' is not supported (loom constraints are KEY or KEY=VALUE terms "
          "joined by '&')"));
    }
  }
  const std::vector<std::string> terms = absl::StrSplit(text, '&');
  for (const std::string& term : terms) {
    if (term.empty()) {
      return SbatchError(
          absl::StrCat(option, Quoted(text), " has an empty term"));
    }
    absl::StatusOr<std::pair<std::string, std::string>> kv =
        ParseConstraint(term);
    if (!kv.ok()) {
      std::string m(kv.status().message());
      if (absl::StartsWith(m, "--constraint: ")) m = m.substr(14);
      return SbatchError(option + m);
    }
    if (kv->first == kLabelPool && partition && kv->second != *partition) {
      return SbatchError(absl::StrCat(option, Quoted(term),
                                      " differs from -p/--partition ",
                                      Quoted(*partition)));
    }
    auto [it, inserted] = selector->insert(*kv);
    if (!inserted && it->second != kv->second) {
      return SbatchError(absl::StrCat(option, Quoted(kv->first),
                                      " is given twice with different values"));
    }
  }
  return absl::OkStatus();
}

// --export into `env`.
absl::Status AddExports(const SbatchOptions& o, const SbatchContext& ctx,
                        std::map<std::string, std::string>* env,
                        std::vector<std::string>* warnings) {
  SbatchExport ex;
  ex.all = true;
  if (o.export_env) ex = *o.export_env;
  if (ex.all) {
    for (const auto& [name, value] : ctx.environment) {
      if (!IsSettableEnvName(name) || absl::StartsWith(name, "SLURM_") ||
          name == "PWD" || name == "OLDPWD" || name == "SHLVL" || name == "_") {
        continue;
      }
      if (!IsValidUtf8(value)) {
        warnings->push_back(absl::StrCat(
            "--export: ", name, " is not passed on: its value is not UTF-8"));
        env->erase(name);
        continue;
      }
      (*env)[name] = value;
    }
  }
  for (const auto& [name, given] : ex.variables) {
    if (!IsSettableEnvName(name)) {
      return SbatchError(absl::StrCat(
          "--export: ", Quoted(name),
          IsIdentifier(name) && name.size() <= 256
              ? " is set by loom for every task and cannot be exported"
              : " is not a variable name (letters, digits and '_', not "
                "starting with a digit)"));
    }
    std::optional<std::string> value = given;
    if (!value) {
      for (const auto& [k, v] : ctx.environment) {
        if (k == name) value = v;
      }
    }
    if (!value) {
      warnings->push_back(absl::StrCat(
          "--export: ", name, " is not set in the environment; skipped"));
      continue;
    }
    if (!IsValidUtf8(*value)) {
      return SbatchError(
          absl::StrCat("--export: the value of ", name, " is not UTF-8 text"));
    }
    (*env)[name] = *std::move(value);
  }
  return absl::OkStatus();
}

// The spec parser is the one judge of a valid spec: `spec` is read back
// from its JSON, and an error is reported under the options' names.
absl::Status CheckWithSpecParser(const JobSpec& spec) {
  constexpr char kSource[] = "sbatch";
  absl::StatusOr<JobSpec> check = ParseJobSpec(JobSpecToJson(spec), kSource);
  if (check.ok()) return absl::OkStatus();
  std::string m(check.status().message());
  if (absl::StartsWith(m, kSource)) {  // drop "sbatch:1:23: "
    if (const size_t sep = m.find(": "); sep != std::string::npos) {
      m = m.substr(sep + 2);
    }
  }
  static constexpr std::pair<const char*, const char*> kOptionOf[] = {
      {"name: ", "-J/--job-name: "},
      {"project: ", "-A/--account: "},
      {"priority: ", "--qos: "},
      {"resources.gpus: ", "the job's GPUs in total: "},
      {"resources.nodes: ", "-N/--nodes: "},
      {"resources.gpu_model: ", "the GPU type: "},
      {"resources.cpus_per_task: ", "-c/--cpus-per-task: "},
      {"resources.memory_per_task: ", "--mem: "},
      {"env.", "--export "},
      {"node_selector.", "-C/--constraint or -p/--partition "},
      {"time_limit: ", "-t/--time: "},
      {"checkpoint.signal: ", "--signal: "},
      {"checkpoint.grace: ", "--signal: the time before the end "},
      {"working_dir: ", "-D/--chdir: "},
      {"dependency: ", "-d/--dependency: "},
      {"array: ", "-a/--array: "},
  };
  if (absl::StartsWith(m, "command")) {  // "command[3]: ..."
    const size_t sep = m.find(": ");
    return SbatchError(
        absl::StrCat("the script and its arguments: ",
                     sep == std::string::npos ? m : m.substr(sep + 2)));
  }
  for (const auto& [field, option] : kOptionOf) {
    if (absl::StartsWith(m, field)) {
      m = absl::StrCat(option, m.substr(std::strlen(field)));
      break;
    }
  }
  return SbatchError(m);
}

}  // namespace sbatch_job_internal

std::vector<std::string> BatchInvocationArgv(const BatchInvocation& b) {
  using sbatch_job_internal::kBatchFlags;
  std::vector<std::string> argv = {"loom", "_batch"};
  for (const auto& f : kBatchFlags) {
    if (f.number != nullptr) {
      argv.push_back(absl::StrCat("--", f.name, "=", b.*f.number));
    } else if (f.optional_number != nullptr) {
      if (const std::optional<int>& v = b.*f.optional_number; v) {
        argv.push_back(absl::StrCat("--", f.name, "=", *v));
      }
    } else if (const std::string& v = b.*f.text; f.always || !v.empty()) {
      argv.push_back(absl::StrCat("--", f.name, "=", v));
    }
  }
  argv.push_back("--script");
  argv.push_back(b.script);
  argv.push_back("--");
  argv.insert(argv.end(), b.args.begin(), b.args.end());
  return argv;
}

absl::StatusOr<BatchInvocation> ParseBatchInvocation(
    const std::vector<std::string>& argv) {
  using sbatch_job_internal::BatchError;
  using sbatch_job_internal::kBatchFlags;
  BatchInvocation b;
  std::set<std::string> seen;
  for (size_t i = 2; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "--") {
      b.args.assign(argv.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                    argv.end());
      break;
    }
    const size_t eq = arg.find('=');
    const std::string flag = arg.substr(0, eq);
    std::optional<std::string> value;
    if (eq != std::string::npos) value = arg.substr(eq + 1);
    const sbatch_job_internal::BatchFlag* spec = nullptr;
    for (const auto& f : kBatchFlags) {
      if (flag == absl::StrCat("--", f.name)) spec = &f;
    }
    if (spec == nullptr && flag != "--script") {
      if (absl::StartsWith(arg, "-")) {
        return BatchError(absl::StrCat("unknown flag \"", flag, "\""));
      }
      return BatchError(absl::StrCat("unexpected argument \"", arg,
                                     "\" (the script's arguments follow "
                                     "\"--\")"));
    }
    if (!seen.insert(flag).second) {
      return BatchError(absl::StrCat(flag, ": given twice"));
    }
    if (spec == nullptr) {  // --script TEXT (or --script=TEXT)
      if (!value) {
        if (i + 1 >= argv.size()) return BatchError("--script: no value");
        value = argv[++i];
      }
      b.script = *std::move(value);
      continue;
    }
    if (!value) {
      return BatchError(
          absl::StrCat(flag, ": no value (write ", flag, "=VALUE)"));
    }
    if (spec->text != nullptr) {
      b.*spec->text = *std::move(value);
      continue;
    }
    const std::optional<int> n = sbatch_job_internal::PositiveNumber(*value);
    if (!n) {
      return BatchError(
          absl::StrCat(flag, ": \"", *value, "\" is not a positive number"));
    }
    if (spec->number != nullptr) {
      b.*spec->number = *n;
    } else {
      b.*spec->optional_number = *n;
    }
  }
  if (!seen.contains("--script")) return BatchError("--script is missing");
  return b;
}

absl::StatusOr<SbatchJob> BuildSbatchJob(const SbatchOptions& o,
                                         const SbatchContext& ctx) {
  namespace sj = sbatch_job_internal;
  using sj::Quoted;
  using sj::SbatchError;
  if (ctx.script.size() > kMaxSbatchScriptBytes) {
    return SbatchError(absl::StrCat("the script is ", ctx.script.size(),
                                    " bytes; at most ", kMaxSbatchScriptBytes,
                                    " are accepted"));
  }
  if (!absl::StartsWith(ctx.script, "#!")) {
    return SbatchError(
        "the script does not start with \"#!\" (a batch script needs an "
        "interpreter line such as #!/bin/bash)");
  }
  if (ctx.script.find('\0') != std::string::npos) {
    return SbatchError("the script contains a NUL byte");
  }
  if (!IsValidUtf8(ctx.script)) {
    return SbatchError("the script is not UTF-8 text");
  }
  for (size_t i = 0; i < ctx.args.size(); ++i) {
    if (!IsValidUtf8(ctx.args[i]) ||
        ctx.args[i].find('\0') != std::string::npos) {
      return SbatchError(absl::StrCat("the script's argument ", i + 1,
                                      " is not UTF-8 text without NUL"));
    }
  }

  SbatchJob job;
  JobSpec& spec = job.spec;
  BatchInvocation& b = job.batch;
  std::vector<std::string>& warnings = job.warnings;

  absl::StatusOr<sj::SbatchShape> shape = sj::ShapeOf(o, ctx, &warnings);
  if (!shape.ok()) return shape.status();
  spec.nodes = shape->nodes;
  spec.gpus = shape->nodes * shape->gpus_per_node;
  spec.gpu_model = shape->gpu_type.empty()
                       ? std::string("any")
                       : absl::AsciiStrToLower(shape->gpu_type);
  spec.processes_per_task = 1;
  const int64_t tasks_per_node = sj::CeilDiv(shape->ntasks, shape->nodes);

  if (o.cpus_per_task) {
    if (*o.cpus_per_task < 1) {
      return SbatchError(
          absl::StrCat("-c/--cpus-per-task: must be at least 1, "
                       "got ",
                       *o.cpus_per_task));
    }
    const int64_t cores = int64_t{*o.cpus_per_task} * tasks_per_node;
    if (cores > int64_t{1} << 40) {
      return SbatchError(absl::StrCat("-c/--cpus-per-task: ", cores,
                                      " cores per node is too many"));
    }
    spec.cpus_milli_per_task = cores * 1000;
  }
  if (o.mem_bytes) {
    if (*o.mem_bytes < 0) {
      return SbatchError(
          absl::StrCat("--mem: must not be negative, got ", *o.mem_bytes));
    }
    if (*o.mem_bytes == 0) {
      warnings.push_back(
          "--mem=0: loom has no \"all of a node's memory\"; the job asks for "
          "no memory");
    } else {
      spec.memory_bytes_per_task = *o.mem_bytes;
    }
  }
  if (o.time_limit_seconds) {
    if (*o.time_limit_seconds < 0) {
      return SbatchError(absl::StrCat("-t/--time: must not be negative, got ",
                                      *o.time_limit_seconds));
    }
    if (*o.time_limit_seconds > 0) {
      spec.time_limit = absl::Seconds(*o.time_limit_seconds);
    }
  }

  if (o.partition) spec.node_selector[kLabelPool] = *o.partition;
  if (o.constraint) {
    if (absl::Status st =
            sj::AddConstraint(*o.constraint, o.partition, &spec.node_selector);
        !st.ok()) {
      return st;
    }
  }

  if (o.account) {
    if (!IsValidProjectName(*o.account)) {
      return SbatchError(absl::StrCat(
          "-A/--account: ", Quoted(*o.account),
          " is not a valid project name (1 to 128 bytes, no spaces or "
          "control characters)"));
    }
    spec.project = *o.account;
  }
  if (o.qos) {
    if (!IsValidProjectName(*o.qos)) {
      return SbatchError(absl::StrCat(
          "--qos: ", Quoted(*o.qos),
          " is not a valid priority class name (1 to 128 bytes, no spaces or "
          "control characters)"));
    }
    spec.priority = *o.qos;
  }
  if (o.array) {
    absl::StatusOr<ArraySpec> array = ParseArraySpec(*o.array);
    if (!array.ok()) {
      return SbatchError(
          absl::StrCat("-a/--array: ", std::string(array.status().message())));
    }
    spec.array = FormatArraySpec(*array);
  }
  if (o.dependency) {
    absl::StatusOr<JobDependency> dep = ParseDependency(*o.dependency);
    if (!dep.ok()) {
      return SbatchError(absl::StrCat("-d/--dependency: ",
                                      std::string(dep.status().message())));
    }
    spec.dependency = FormatDependency(*dep);
  }
  spec.kill_on_invalid_dep = o.kill_on_invalid_dep.value_or(false);
  spec.hold = o.hold.value_or(false);
  if (o.requeue.has_value() && !*o.requeue) spec.requeue.max = 0;

  if (o.signal) {
    if (o.signal->number == SIGKILL || o.signal->number == SIGSTOP) {
      return SbatchError(
          absl::StrCat("--signal: ", SignalName(o.signal->number),
                       " cannot be caught, so the job would get no warning"));
    }
    if (o.signal->seconds_before_end < 0) {
      return SbatchError(absl::StrCat("--signal: @",
                                      o.signal->seconds_before_end,
                                      " must not be negative"));
    }
    spec.checkpoint.signal = o.signal->number;
    spec.checkpoint.grace = absl::Seconds(o.signal->seconds_before_end);
    if (o.signal->batch_shell_only) {
      warnings.push_back(
          "--signal: B: is ignored; loom signals every process of the job");
    }
  }

  if (o.chdir) {
    std::string dir = *o.chdir;
    if (dir.empty()) return SbatchError("-D/--chdir: must not be empty");
    if (dir[0] != '/') {
      if (ctx.submit_dir.empty()) {
        return SbatchError(absl::StrCat("-D/--chdir: ", Quoted(dir),
                                        " is relative and the submission "
                                        "directory is not known"));
      }
      dir = absl::StrCat(ctx.submit_dir, "/", dir);
    }
    absl::StatusOr<std::string> normal = NormalizeAbsolutePath(dir);
    if (!normal.ok()) {
      return SbatchError(
          absl::StrCat("-D/--chdir: ", std::string(normal.status().message())));
    }
    spec.working_dir = *std::move(normal);
  } else {
    spec.working_dir = ctx.submit_dir;
  }

  if (absl::Status st = sj::AddExports(o, ctx, &spec.env, &warnings);
      !st.ok()) {
    return st;
  }

  if (o.job_name) {
    if (!IsValidJobName(*o.job_name)) {
      return SbatchError(absl::StrCat(
          "-J/--job-name: ", Quoted(*o.job_name),
          " is not a valid job name (1 to 63 lower-case letters, digits and "
          "'-', starting with a letter)"));
    }
    spec.name = *o.job_name;
  } else {
    spec.name = JobNameFromPath(ctx.script_name);
  }
  spec.kind = JobKind::kBatch;
  spec.user = ctx.user;

  b.ntasks = shape->ntasks;
  b.ntasks_per_node = o.ntasks_per_node;
  b.cpus_per_task = o.cpus_per_task;
  if (o.gpus_per_node) b.gpus_per_node = o.gpus_per_node->count;
  b.job_name = spec.name;
  b.submit_dir = ctx.submit_dir;
  b.submit_host = ctx.submit_host;
  b.account = spec.project;
  b.partition = o.partition.value_or("");
  b.output = o.output && !o.output->empty()
                 ? *o.output
                 : std::string(spec.array.empty() ? "slurm-%j.out"
                                                  : "slurm-%A_%a.out");
  b.error = o.error.value_or("");
  b.script = ctx.script;
  b.args = ctx.args;
  spec.command = BatchInvocationArgv(b);
  for (const std::string& arg : spec.command) {
    if (!IsValidUtf8(arg) || arg.find('\0') != std::string::npos) {
      static constexpr std::pair<const char*, const char*> kWhat[] = {
          {"--output=", "-o/--output"},
          {"--error=", "-e/--error"},
          {"--partition=", "-p/--partition"},
          {"--submit-dir=", "the submission directory"},
          {"--submit-host=", "the submission host"}};
      std::string what = "the batch command";
      for (const auto& [prefix, name] : kWhat) {
        if (absl::StartsWith(arg, prefix)) what = name;
      }
      return SbatchError(what + ": not UTF-8 text without NUL");
    }
  }
  if (absl::Status st = sj::CheckWithSpecParser(spec); !st.ok()) {
    return st;
  }
  return job;
}

}  // namespace loom
