#include "loom/agent/mig_step.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "loom/agent/json_values.h"
#include "loom/agent/mig_control.h"
#include "loom/core/mig.h"

namespace loom {
namespace {

// Serialises the MIG launches' layouts, and the health rounds' retries of
// a mode change, of every node of the agent.
absl::Mutex& MigLaunchMutex() {
  static absl::Mutex* mu = new absl::Mutex();
  return *mu;
}

std::string LayoutText(const MigLayout& layout) {
  return absl::StrCat(
      "[",
      absl::StrJoin(layout, ", ",
                    [](std::string* out, const std::pair<std::string, int>& e) {
                      absl::StrAppend(out, e.first, "@", e.second);
                    }),
      "]");
}

// `status`'s code, with "node NAME: " before its message and `*field` set
// to "slice".
absl::Status SliceError(std::string* field, const AgentNode& node,
                        const absl::Status& status) {
  if (field != nullptr) *field = "slice";
  return absl::Status(status.code(), absl::StrCat("node ", node.name, ": ",
                                                  Str(status.message())));
}

class MigStep : public LaunchStep {
 public:
  std::string_view name() const override { return "mig"; }

  absl::Status Prepare(LaunchContext& ctx, std::string* field) const override {
    const LaunchRequest& r = ctx.request;
    if (!r.slice || r.slice->mig.empty()) return FreeOfMig(ctx, field);
    const SliceRequest& s = *r.slice;
    const AgentNode& node = ctx.node;
    const int g = r.gpus.empty() ? -1 : r.gpus.front();
    const GpuDevice* gpu = nullptr;
    for (const GpuDevice& d : node.gpus) {
      if (d.index == g) gpu = &d;
    }
    if (gpu == nullptr) {
      return FieldError(field, "gpus",
                        absl::StrCat("node ", node.name, " has no GPU ", g));
    }
    const std::vector<MigProfile> profiles =
        MigProfilesFor(gpu->model, gpu->memory_bytes);
    if (profiles.empty()) {
      return FieldError(field, "slice",
                        absl::StrCat("GPU ", g, " of node ", node.name, " (",
                                     gpu->model, ") is not MIG-capable"));
    }
    if (s.profile >= static_cast<int>(profiles.size()) ||
        profiles[s.profile].name != s.mig) {
      const MigProfile* named = FindMigProfile(profiles, s.mig);
      return FieldError(
          field, "slice.profile",
          absl::StrCat(
              "profile ", s.profile, " is not ", s.mig, " on GPU ", g,
              " of node ", node.name,
              named == nullptr
                  ? absl::StrCat(" (", gpu->model, " has no ", s.mig, ")")
                  : absl::StrCat(" (it is profile ", named - profiles.data(),
                                 ")")));
    }
    std::vector<MigInstance> layout;
    for (size_t i = 0; i < s.layout.size(); ++i) {
      const MigProfile* p = FindMigProfile(profiles, s.layout[i].first);
      if (p == nullptr) {
        return FieldError(
            field, absl::StrCat("slice.layout[", i, "]"),
            absl::StrCat("GPU ", g, " of node ", node.name, " (", gpu->model,
                         ") has no profile ", s.layout[i].first));
      }
      layout.push_back(
          {static_cast<int>(p - profiles.data()), s.layout[i].second});
    }
    if (absl::Status v = ValidateMigLayout(profiles, layout); !v.ok()) {
      return FieldError(field, "slice.layout", Str(v.message()));
    }
    if (node.mig == nullptr) {
      return SliceError(field, node,
                        absl::FailedPreconditionError(
                            "cannot make MIG instances (no MIG control)"));
    }
    absl::MutexLock lock(&MigLaunchMutex());
    absl::StatusOr<MigState> state = node.mig->Describe(g);
    if (!state.ok()) return SliceError(field, node, state.status());
    if (absl::Status busy = CheckNoTaskLoses(node, r, g, *state, &s.layout);
        !busy.ok()) {
      ctx.log("warn", node.name,
              absl::StrCat("launch of task ", r.task_id,
                           " refused: ", Str(busy.message())));
      return SliceError(field, node, busy);
    }
    absl::StatusOr<std::vector<MigInstanceInfo>> instances =
        node.mig->Ensure(g, s.layout);
    if (!instances.ok()) {
      // MIG mode could not be turned on now: another process holds the GPU
      // open, or the platform needs a reset. The node's state, not the
      // task's fault.
      absl::StatusOr<MigState> after = node.mig->Describe(g);
      if (after.ok() && MigModeWaits(*after)) {
        return ModeWaits(ctx, field, "slice", g, true);
      }
      return SliceError(field, node, instances.status());
    }
    NoteModeSettled(node, g);
    for (const MigInstanceInfo& in : *instances) {
      if (in.profile == s.mig && in.start == s.start && !in.uuid.empty()) {
        ctx.mig_uuid = in.uuid;
        ctx.mig_gi = in.gi_id;
        return absl::OkStatus();
      }
    }
    return SliceError(
        field, node,
        absl::InternalError(absl::StrCat(
            "GPU ", g, " has no ", s.mig, " instance at memory slice ", s.start,
            " after its layout was made ", LayoutText(s.layout))));
  }

  void Apply(const LaunchContext& ctx, const TaskProcess&, int,
             TaskSpec& spec) const override {
    const std::optional<SliceRequest>& s = ctx.request.slice;
    if (!s) return;
    if (s->mig.empty()) {
      spec.env["LOOM_GPU_MEMORY_LIMIT"] = absl::StrCat(s->share_bytes);
      return;
    }
    spec.env["CUDA_VISIBLE_DEVICES"] = ctx.mig_uuid;
    spec.env["LOOM_MIG_PROFILE"] = s->mig;
  }

 private:
  // A task that uses its GPUs whole, or shares one: a GPU in MIG mode (as a
  // MIG task of a `mig.dynamic` pool leaves it, or set by hand) is turned
  // back (`Disable`), or the task would see the GPU's first instance
  // instead of the GPU. A GPU whose MIG state cannot be read is launched on
  // as it is. A change that fails or waits is the node's state: Aborted,
  // as `ModeWaits`.
  absl::Status FreeOfMig(const LaunchContext& ctx, std::string* field) const {
    const AgentNode& node = ctx.node;
    const LaunchRequest& r = ctx.request;
    if (node.mig == nullptr || r.gpus.empty()) return absl::OkStatus();
    absl::MutexLock lock(&MigLaunchMutex());
    for (int g : r.gpus) {
      absl::StatusOr<MigState> state = node.mig->Describe(g);
      if (!state.ok() || !state->capable ||
          (!state->enabled && !state->pending)) {
        continue;
      }
      if (absl::Status busy = CheckNoTaskLoses(node, r, g, *state, nullptr);
          !busy.ok()) {
        if (field != nullptr) *field = "gpus";
        return absl::Status(busy.code(), absl::StrCat("node ", node.name, ": ",
                                                      busy.message()));
      }
      absl::StatusOr<MigState> after = node.mig->Disable(g);
      if (!after.ok()) {
        return ModeWaits(ctx, field, "gpus", g, false,
                         Str(after.status().message()));
      }
      if (MigModeWaits(*after)) return ModeWaits(ctx, field, "gpus", g, false);
      ctx.log("info", node.name,
              absl::StrCat("GPU ", g, ": MIG mode turned off for task ",
                           r.task_id, ", which ",
                           r.slice ? "shares the GPU" : "uses the GPU whole"));
      NoteModeSettled(node, g);
    }
    return absl::OkStatus();
  }

  // The change of GPU `g`'s MIG mode (to `on`) that the task needs waits:
  // the node says so in its heartbeats (and takes no new work), and the
  // launch is Aborted, which the agent answers with 503, so that the server
  // queues the job again without using up a restart (docs/agent.md, "MIG").
  // `failure`, when given: the change failed (NVML's error) rather than
  // waits; the health rounds ask again all the same.
  static absl::Status ModeWaits(const LaunchContext& ctx, std::string* field,
                                const char* field_name, int g, bool on,
                                const std::string& failure = "") {
    if (g >= 0 && g < 32) {
      if (on) {
        ctx.node.mig_wants_off.fetch_and(~(1u << g));
      } else {
        ctx.node.mig_wants_off.fetch_or(1u << g);
      }
      ctx.node.mig_waits.fetch_or(1u << g);
    }
    if (field != nullptr) *field = field_name;
    const std::string what =
        failure.empty() ? std::string(
                              "the change waits until the GPU is idle (another "
                              "process may hold it open) or reset")
                        : absl::StrCat("the change failed (", failure, ")");
    const absl::Status status = absl::AbortedError(absl::StrCat(
        "node ", ctx.node.name, ": GPU ", g, ": MIG mode must be turned ",
        on ? "on" : "off", " for this task, and ", what,
        "; the node takes no new work until then"));
    ctx.log("warn", ctx.node.name,
            absl::StrCat("launch of task ", ctx.request.task_id,
                         " not started: ", Str(status.message())));
    return status;
  }

  static void NoteModeSettled(const AgentNode& node, int g) {
    if (g >= 0 && g < 32) node.mig_waits.fetch_and(~(1u << g));
  }

  // OK unless making `r`'s layout on GPU `g` (now `state`) would take away
  // what a live task of `node` (other than `r`'s) runs on: an instance
  // that the layout lacks, or, when the GPU changes at all, the GPU a task
  // uses whole or as a share. `layout` null: MIG mode is to be turned off.
  static absl::Status CheckNoTaskLoses(const AgentNode& node,
                                       const LaunchRequest& r, int g,
                                       const MigState& state,
                                       const MigLayout* layout) {
    static const MigLayout kNone;
    const MigLayout& want = layout != nullptr ? *layout : kNone;
    const std::string change =
        layout != nullptr ? absl::StrCat("the layout ", LayoutText(want))
                          : std::string("turning MIG mode off");
    std::vector<const MigInstanceInfo*> doomed;
    std::vector<bool> kept(want.size(), false);
    for (const MigInstanceInfo& in : state.instances) {
      bool keep = false;
      for (size_t i = 0; i < want.size() && !keep; ++i) {
        if (!kept[i] && want[i].first == in.profile &&
            want[i].second == in.start) {
          kept[i] = keep = true;
        }
      }
      if (!keep) doomed.push_back(&in);
    }
    const bool changes =
        state.enabled != (layout != nullptr) || !doomed.empty() ||
        std::find(kept.begin(), kept.end(), false) != kept.end();
    if (!changes) return absl::OkStatus();
    // The node's task table; the step only reads it (`node.mu` is not
    // mutable, the node is shared as const with the steps).
    absl::Mutex& mu = const_cast<absl::Mutex&>(node.mu);
    absl::MutexLock lock(&mu);
    for (const auto& [id, unit] : node.units) {
      if (id == r.task_id) continue;
      const bool live =
          unit.launching ||
          std::any_of(unit.procs.begin(), unit.procs.end(),
                      [](const TaskProcess& p) { return !p.ended(); });
      if (!live) continue;
      std::string uuid = unit.mig_uuid;
      for (const TaskProcess& p : unit.procs) {
        if (!uuid.empty()) break;
        if (p.pid > 0 && !p.ended()) uuid = MigUuidOfProcess(p.pid);
      }
      if (!uuid.empty()) {
        for (const MigInstanceInfo* in : doomed) {
          if (in->uuid != uuid) continue;
          return absl::FailedPreconditionError(absl::StrCat(
              "GPU ", g, ": ", change, " would destroy MIG instance ",
              in->profile, " at memory slice ", in->start, " (", uuid,
              "), which running task ", id, " uses"));
        }
        continue;
      }
      if (std::find(unit.gpus.begin(), unit.gpus.end(), g) != unit.gpus.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "GPU ", g, ": running task ", id,
            " uses the GPU (not a MIG instance of it); ",
            layout != nullptr
                ? absl::StrCat("its layout cannot change to ", LayoutText(want))
                : std::string("its MIG mode cannot change"),
            " under it"));
      }
    }
    return absl::OkStatus();
  }
};

// Whether a live task of `node` uses GPU `g` (whole, shared or MIG).
bool GpuInUse(const AgentNode& node, int g) {
  absl::Mutex& mu = const_cast<absl::Mutex&>(node.mu);
  absl::MutexLock lock(&mu);
  for (const auto& [id, unit] : node.units) {
    const bool live =
        unit.launching ||
        std::any_of(unit.procs.begin(), unit.procs.end(),
                    [](const TaskProcess& p) { return !p.ended(); });
    if (live &&
        std::find(unit.gpus.begin(), unit.gpus.end(), g) != unit.gpus.end()) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool SettleMigModes(const AgentNode& node, const AgentLog& log) {
  const uint32_t waits = node.mig_waits.load();
  if (waits == 0 || node.mig == nullptr) return false;
  absl::MutexLock lock(&MigLaunchMutex());  // not under a launch's feet
  bool settled = false;
  for (int g = 0; g < 32; ++g) {
    if (((waits >> g) & 1) == 0) continue;
    const bool off = ((node.mig_wants_off.load() >> g) & 1) != 0;
    // A GPU in use cannot change now; it may have been reset by hand. One
    // to turn off is asked again the whole way (its instances too).
    absl::StatusOr<MigState> state = GpuInUse(node, g) ? node.mig->Describe(g)
                                     : off             ? node.mig->Disable(g)
                                                       : node.mig->Settle(g);
    if (!state.ok()) {
      log("warn", node.name,
          absl::StrCat("GPU ", g, ": cannot settle its MIG mode: ",
                       Str(state.status().message())));
      continue;
    }
    if (MigModeWaits(*state) || (off && state->enabled)) continue;
    node.mig_waits.fetch_and(~(1u << g));
    settled = true;
    log("info", node.name,
        absl::StrCat("GPU ", g, ": MIG mode is ", state->enabled ? "on" : "off",
                     " now; the node takes new work again"));
  }
  return settled;
}

std::unique_ptr<const LaunchStep> MakeMigStep() {
  return std::make_unique<MigStep>();
}

std::string MigUuidOfProcess(pid_t pid, const std::string& proc_root) {
  std::ifstream in(absl::StrCat(proc_root, "/", pid, "/environ"),
                   std::ios::binary);
  if (!in) return "";
  const std::string env((std::istreambuf_iterator<char>(in)),
                        std::istreambuf_iterator<char>());
  for (absl::string_view var : absl::StrSplit(env, '\0')) {
    if (!absl::ConsumePrefix(&var, "CUDA_VISIBLE_DEVICES=")) continue;
    absl::string_view first = var.substr(0, var.find(','));
    return absl::StartsWith(first, "MIG-") ? std::string(first) : "";
  }
  return "";
}

}  // namespace loom
