#include "loom/agent/launch_steps.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/agent/checkpoint_dir.h"
#include "loom/agent/data_step.h"
#include "loom/agent/image_step.h"
#include "loom/agent/json_values.h"
#include "loom/agent/mig_step.h"
#include "loom/agent/nic_step.h"
#include "loom/agent/replica_port.h"

namespace loom {
namespace {

// Where the process's output goes (the paths the runner chose, under the
// node's `logs/`).
class TaskFilesStep : public LaunchStep {
 public:
  std::string_view name() const override { return "files"; }
  void Apply(const LaunchContext&, const TaskProcess& proc, int,
             TaskSpec& spec) const override {
    spec.stdout_path = proc.stdout_path;
    spec.stderr_path = proc.stderr_path;
  }
};

// The torch.distributed contract's per-process part (the server sets the
// rest: MASTER_ADDR, WORLD_SIZE, ...), and where the task runs.
class EnvContractStep : public LaunchStep {
 public:
  explicit EnvContractStep(std::string servers)
      : servers_(std::move(servers)) {}
  std::string_view name() const override { return "env"; }
  void Apply(const LaunchContext& ctx, const TaskProcess&, int k,
             TaskSpec& spec) const override {
    const LaunchRequest& r = ctx.request;
    if (r.processes > 1 || r.rank_base) {
      spec.env["RANK"] = absl::StrCat(r.rank_base.value_or(0) + k);
      spec.env["LOCAL_RANK"] = absl::StrCat(k);
    }
    if (r.processes > 1) {
      spec.env.try_emplace("LOCAL_WORLD_SIZE", absl::StrCat(r.processes));
    }
    spec.env.try_emplace("LOOM_NODE", ctx.node.name);
    // So that `loom checkpoint` (or any loom CLI call) works inside a task.
    spec.env.try_emplace("LOOM_SERVER", servers_);
  }

 private:
  const std::string servers_;
};

class GpuStep : public LaunchStep {
 public:
  std::string_view name() const override { return "gpus"; }
  absl::Status Prepare(LaunchContext& ctx, std::string* field) const override {
    const AgentNode& node = ctx.node;
    for (int g : ctx.request.gpus) {
      if (g >= static_cast<int>(node.gpus.size())) {
        return FieldError(
            field, "gpus",
            absl::StrCat("node ", node.name, " has ", node.gpus.size(),
                         " GPUs (indices 0 to ",
                         static_cast<int>(node.gpus.size()) - 1, "); got ", g));
      }
    }
    return absl::OkStatus();
  }
  void Apply(const LaunchContext& ctx, const TaskProcess&, int,
             TaskSpec& spec) const override {
    spec.env.try_emplace("CUDA_VISIBLE_DEVICES",
                         absl::StrJoin(ctx.request.gpus, ","));
  }
};

// Memory and CPU limits, applied by the launcher's cgroups.
class LimitsStep : public LaunchStep {
 public:
  std::string_view name() const override { return "limits"; }
  void Apply(const LaunchContext& ctx, const TaskProcess&, int,
             TaskSpec& spec) const override {
    spec.limits = ctx.request.limits;
  }
};

// The job's user (docs/agent.md, "Users"): looked up once per task; each
// process switches to it (uid, gid, groups, HOME, USER, and its home as the
// working directory when the request names none).
class UserStep : public LaunchStep {
 public:
  UserStep(bool switch_users, UserLookup lookup)
      : switch_users_(switch_users), lookup_(std::move(lookup)) {}
  std::string_view name() const override { return "user"; }
  absl::Status Prepare(LaunchContext& ctx, std::string* field) const override {
    const LaunchRequest& r = ctx.request;
    if (!switch_users_ || r.user.empty()) return absl::OkStatus();
    absl::StatusOr<UserAccount> account = lookup_(r.user);
    absl::Status failure;
    if (absl::IsNotFound(account.status())) {
      failure = absl::FailedPreconditionError(absl::StrCat(
          "user '", r.user, "' does not exist on node ", ctx.node.name));
    } else if (!account.ok()) {
      failure = absl::UnavailableError(
          absl::StrCat("node ", ctx.node.name, ": cannot look up user '",
                       r.user, "': ", Str(account.status().message())));
    }
    if (!failure.ok()) {
      if (field != nullptr) *field = "user";
      ctx.log("warn", ctx.node.name,
              absl::StrCat("launch of task ", r.task_id,
                           " failed: ", Str(failure.message())));
      return failure;
    }
    ctx.user = *std::move(account);
    return absl::OkStatus();
  }
  void Apply(const LaunchContext& ctx, const TaskProcess&, int,
             TaskSpec& spec) const override {
    if (ctx.user) RunSpecAs(*ctx.user, spec);
  }

 private:
  const bool switch_users_;
  const UserLookup lookup_;
};

// `LOOM_CHECKPOINT_DIR`: the one the job names (made by each process as its
// user, so that the user owns it), else one on this node, the user's
// (checkpoint_dir.h). Without either the task runs, without the variable.
class CheckpointStep : public LaunchStep {
 public:
  explicit CheckpointStep(bool on_node) : on_node_(on_node) {}
  std::string_view name() const override { return "checkpoint"; }
  absl::Status Prepare(LaunchContext& ctx, std::string*) const override {
    const LaunchRequest& r = ctx.request;
    const UserAccount* user = ctx.user ? &*ctx.user : nullptr;
    absl::StatusOr<std::string> dir = DefaultCheckpointDir(
        on_node_ ? ctx.node.root : "", r.job_id, r.env,
        user ? std::optional(std::pair(user->uid, user->gid)) : std::nullopt);
    if (!dir.ok()) {
      ctx.log(
          "warn", ctx.node.name,
          absl::StrCat("task ", r.task_id, ": ", Str(dir.status().message())));
      return absl::OkStatus();
    }
    ctx.checkpoint_dir = *std::move(dir);
    return absl::OkStatus();
  }
  void Apply(const LaunchContext& ctx, const TaskProcess&, int,
             TaskSpec& spec) const override {
    if (auto it = spec.env.find("LOOM_CHECKPOINT_DIR"); it != spec.env.end()) {
      spec.create_dirs.push_back(it->second);
    } else if (!ctx.checkpoint_dir.empty()) {
      spec.env.emplace("LOOM_CHECKPOINT_DIR", ctx.checkpoint_dir);
    }
  }

 private:
  const bool on_node_;
};

}  // namespace

// A host-process task's "loom" is the agent's own binary.
class SelfExeStep : public LaunchStep {
 public:
  explicit SelfExeStep(std::string self_exe) : self_exe_(std::move(self_exe)) {}
  std::string_view name() const override { return "self"; }
  void Apply(const LaunchContext& ctx, const TaskProcess&, int,
             TaskSpec& spec) const override {
    if (!self_exe_.empty() && !ctx.request.container.has_value() &&
        !spec.argv.empty() && spec.argv[0] == "loom") {
      spec.argv[0] = self_exe_;
    }
  }

 private:
  const std::string self_exe_;
};

LaunchSteps DefaultLaunchSteps(const LaunchStepsOptions& options) {
  LaunchSteps steps;
  steps.push_back(std::make_unique<TaskFilesStep>());
  steps.push_back(std::make_unique<EnvContractStep>(
      absl::StrJoin(options.server_urls, ",")));
  steps.push_back(MakeReplicaPortStep());
  steps.push_back(std::make_unique<GpuStep>());
  steps.push_back(MakeMigStep());
  steps.push_back(MakeNicStep());
  steps.push_back(std::make_unique<LimitsStep>());
  steps.push_back(
      std::make_unique<UserStep>(options.switch_users, options.lookup_user));
  steps.push_back(std::make_unique<CheckpointStep>(options.checkpoint_dirs));
  steps.push_back(std::make_unique<SelfExeStep>(options.self_exe));
  steps.push_back(MakeDataStep());
  steps.push_back(
      MakeImageStep({.runc = options.runc, .gpu_driver = options.gpu_driver}));
  return steps;
}

}  // namespace loom
