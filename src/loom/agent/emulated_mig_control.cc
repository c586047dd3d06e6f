#include "loom/agent/emulated_mig_control.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "absl/strings/str_cat.h"
#include "loom/agent/mig_control_internal.h"
#include "loom/common/fnv.h"

namespace loom {

using mig_internal::Resolved;
using mig_internal::ResolveLayout;
using mig_internal::SortByStart;

EmulatedMigControl::EmulatedMigControl(std::string node_name,
                                       std::vector<GpuDevice> gpus,
                                       std::string log_path)
    : node_name_(std::move(node_name)), log_path_(std::move(log_path)) {
  int max_index = -1;
  for (const GpuDevice& g : gpus) max_index = std::max(max_index, g.index);
  gpus_.resize(static_cast<size_t>(max_index + 1));
  for (const GpuDevice& g : gpus) {
    gpus_[g.index].profiles = MigProfilesFor(g.model, g.memory_bytes);
  }
}

absl::StatusOr<EmulatedMigControl::Gpu*> EmulatedMigControl::Find(int gpu) {
  if (gpu < 0 || gpu >= static_cast<int>(gpus_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("node ", node_name_, " has no GPU ", gpu));
  }
  return &gpus_[gpu];
}

void EmulatedMigControl::Record(const std::string& line) const {
  if (log_path_.empty()) return;
  const std::string text = absl::StrCat(line, " node=", node_name_, "\n");
  const int fd = ::open(log_path_.c_str(),
                        O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;  // a record, not a reason to fail a launch
  ssize_t n;
  do {
    n = ::write(fd, text.data(), text.size());  // one write: one line
  } while (n < 0 && errno == EINTR);
  ::close(fd);
}

absl::StatusOr<std::vector<MigInstanceInfo>> EmulatedMigControl::Ensure(
    int gpu, const MigLayout& layout) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Gpu*> found = Find(gpu);
  if (!found.ok()) return found.status();
  Gpu& g = **found;
  absl::StatusOr<std::vector<Resolved>> wanted =
      ResolveLayout(gpu, g.profiles, layout);
  if (!wanted.ok()) return wanted.status();
  const std::string at = absl::StrCat(" gpu=", gpu);
  if (!g.enabled || !g.pending) SetMode(gpu, g, true);
  if (!g.enabled) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GPU ", gpu,
        ": MIG mode is enabled only after a GPU reset (nvmlDeviceSetMigMode "
        "activation: In use by another client (emulated)); reset the GPU "
        "with no process on it"));
  }
  std::vector<bool> have(wanted->size(), false);
  std::vector<Instance> kept;
  for (const Instance& in : g.instances) {
    bool keep = false;
    for (size_t i = 0; i < wanted->size() && !keep; ++i) {
      if (!have[i] && (*wanted)[i].profile->name == in.info.profile &&
          (*wanted)[i].start == in.info.start) {
        have[i] = keep = true;
      }
    }
    if (keep) {
      kept.push_back(in);
      continue;
    }
    Record(
        absl::StrCat("nvmlComputeInstanceDestroy", at, " gi=", in.id, " ci=0"));
    Record(absl::StrCat("nvmlGpuInstanceDestroy", at, " gi=", in.id));
  }
  g.instances = std::move(kept);
  for (size_t i = 0; i < wanted->size(); ++i) {
    if (have[i]) continue;
    const Resolved& w = (*wanted)[i];
    std::set<int> ids;
    for (const Instance& in : g.instances) ids.insert(in.id);
    int id = 1;
    while (ids.contains(id)) ++id;
    const int nvml_profile = NvmlGpuInstanceProfileId(*w.profile);
    Record(absl::StrCat("nvmlDeviceCreateGpuInstanceWithPlacement", at,
                        " profile=", nvml_profile, " start=", w.start,
                        " size=", w.profile->memory_slices));
    Record(absl::StrCat(
        "nvmlGpuInstanceCreateComputeInstance", at, " gi=", id,
        " profile=", NvmlComputeInstanceProfileId(w.profile->compute_slices)));
    const std::string key =
        absl::StrCat(node_name_, "/", gpu, "/", w.profile->name, "@", w.start);
    const std::string uuid =
        EmulatedUuid("MIG", key, 0x6d6967ULL, 0x736c696365ULL);
    g.instances.push_back({id, {w.profile->name, w.start, uuid, id}});
  }
  std::vector<MigInstanceInfo> out;
  for (const Instance& in : g.instances) out.push_back(in.info);
  SortByStart(out);
  return out;
}

absl::StatusOr<std::vector<MigInstanceInfo>> EmulatedMigControl::List(int gpu) {
  absl::StatusOr<MigState> state = Describe(gpu);
  if (!state.ok()) return state.status();
  return state->instances;
}

absl::StatusOr<MigState> EmulatedMigControl::Describe(int gpu) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Gpu*> found = Find(gpu);
  if (!found.ok()) return found.status();
  return StateOf(**found);
}

MigState EmulatedMigControl::StateOf(const Gpu& g) const {
  MigState state;
  state.capable = !g.profiles.empty();
  state.enabled = g.enabled;
  state.pending = g.pending;
  for (const Instance& in : g.instances) state.instances.push_back(in.info);
  SortByStart(state.instances);
  return state;
}

void EmulatedMigControl::SetMode(int gpu, Gpu& g, bool on) {
  Record(absl::StrCat("nvmlDeviceSetMigMode gpu=", gpu, " mode=", on ? 1 : 0));
  g.pending = on;
  if (!g.held) g.enabled = on;
}

absl::StatusOr<MigState> EmulatedMigControl::Disable(int gpu) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Gpu*> found = Find(gpu);
  if (!found.ok()) return found.status();
  Gpu& g = **found;
  if (g.profiles.empty() || (!g.enabled && !g.pending)) return StateOf(g);
  for (const Instance& in : g.instances) {
    Record(absl::StrCat("nvmlComputeInstanceDestroy gpu=", gpu, " gi=", in.id,
                        " ci=0"));
    Record(absl::StrCat("nvmlGpuInstanceDestroy gpu=", gpu, " gi=", in.id));
  }
  g.instances.clear();
  SetMode(gpu, g, false);
  return StateOf(g);
}

absl::StatusOr<MigState> EmulatedMigControl::Settle(int gpu) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Gpu*> found = Find(gpu);
  if (!found.ok()) return found.status();
  Gpu& g = **found;
  if (g.enabled != g.pending) SetMode(gpu, g, g.pending);
  return StateOf(g);
}

absl::Status EmulatedMigControl::Hold(int gpu, bool held) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Gpu*> found = Find(gpu);
  if (!found.ok()) return found.status();
  (*found)->held = held;
  return absl::OkStatus();
}

absl::Status EmulatedMigControl::Reset(int gpu) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Gpu*> found = Find(gpu);
  if (!found.ok()) return found.status();
  Gpu& g = **found;
  g.held = false;
  g.enabled = g.pending;
  g.instances.clear();
  return absl::OkStatus();
}

}  // namespace loom
