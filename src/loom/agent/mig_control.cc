#include "loom/agent/mig_control.h"

#include <dlfcn.h>

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "loom/agent/json_values.h"
#include "loom/agent/mig_control_internal.h"

namespace loom {
// The NVML declarations MIG needs (named, not anonymous: `NvmlMigControl`'s
// private parts hold them).
namespace mig_nvml {

// The NVML declarations MIG needs (nvml.h; the library is loaded at run
// time). Handles are opaque pointers, `nvmlReturn_t` an int-sized enum.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
using NvmlGpuInstance = struct NvmlGpuInstanceOpaque*;
using NvmlComputeInstance = struct NvmlComputeInstanceOpaque*;
struct NvmlGpuInstancePlacement {  // nvmlGpuInstancePlacement_t
  unsigned int start;
  unsigned int size;
};
struct NvmlGpuInstanceProfileInfo {  // nvmlGpuInstanceProfileInfo_t (v1)
  unsigned int id;
  unsigned int is_p2p_supported;
  unsigned int slice_count;
  unsigned int instance_count;
  unsigned int multiprocessor_count;
  unsigned int copy_engine_count;
  unsigned int decoder_count;
  unsigned int encoder_count;
  unsigned int jpeg_count;
  unsigned int ofa_count;
  unsigned long long memory_size_mb;
};
struct NvmlGpuInstanceInfo {  // nvmlGpuInstanceInfo_t
  NvmlDevice device;
  unsigned int id;
  unsigned int profile_id;
  NvmlGpuInstancePlacement placement;
};
struct NvmlComputeInstanceProfileInfo {  // nvmlComputeInstanceProfileInfo_t
  unsigned int id;
  unsigned int slice_count;
  unsigned int instance_count;
  unsigned int multiprocessor_count;
  unsigned int shared_copy_engine_count;
  unsigned int shared_decoder_count;
  unsigned int shared_encoder_count;
  unsigned int shared_jpeg_count;
  unsigned int shared_ofa_count;
};
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlErrorNotSupported = 3;
constexpr NvmlReturn kNvmlErrorNotFound = 6;
constexpr unsigned int kNvmlDeviceMigDisable = 0;  // NVML_DEVICE_MIG_DISABLE
constexpr unsigned int kNvmlDeviceMigEnable = 1;   // NVML_DEVICE_MIG_ENABLE
// NVML_GPU_INSTANCE_PROFILE_COUNT of the profiles this code names (up to
// 1_SLICE_REV2 = 9), NVML_COMPUTE_INSTANCE_PROFILE_COUNT (up to
// 1_SLICE_REV1 = 7).
constexpr unsigned int kGpuInstanceProfiles = 10;
constexpr unsigned int kComputeInstanceProfiles = 8;
constexpr unsigned int kComputeEngineShared = 0;  // ..._ENGINE_PROFILE_SHARED
constexpr unsigned int kMaxInstances = 8;
constexpr unsigned int kUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_...

}  // namespace mig_nvml

using mig_internal::Resolved;
using mig_internal::ResolveLayout;
using mig_internal::SortByStart;

namespace {

using json = nlohmann::json;
using mig_nvml::kComputeEngineShared;
using mig_nvml::kComputeInstanceProfiles;
using mig_nvml::kGpuInstanceProfiles;
using mig_nvml::kMaxInstances;
using mig_nvml::kNvmlDeviceMigDisable;
using mig_nvml::kNvmlDeviceMigEnable;
using mig_nvml::kNvmlErrorNotFound;
using mig_nvml::kNvmlErrorNotSupported;
using mig_nvml::kNvmlSuccess;
using mig_nvml::kUuidBufferSize;
using mig_nvml::NvmlComputeInstance;
using mig_nvml::NvmlComputeInstanceProfileInfo;
using mig_nvml::NvmlDevice;
using mig_nvml::NvmlGpuInstance;
using mig_nvml::NvmlGpuInstanceInfo;
using mig_nvml::NvmlGpuInstancePlacement;
using mig_nvml::NvmlGpuInstanceProfileInfo;
using mig_nvml::NvmlReturn;

// loom's name of the profile with NVML id `id`.
std::string ProfileName(const std::vector<MigProfile>& profiles,
                        unsigned int id) {
  for (const MigProfile& p : profiles) {
    if (NvmlGpuInstanceProfileId(p) == static_cast<int>(id)) return p.name;
  }
  return absl::StrCat("nvml-profile-", id);
}

}  // namespace

namespace mig_internal {

absl::StatusOr<std::vector<Resolved>> ResolveLayout(
    int gpu, const std::vector<MigProfile>& profiles, const MigLayout& layout) {
  if (profiles.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU ", gpu, " is not MIG-capable"));
  }
  std::vector<Resolved> out;
  std::vector<MigInstance> check;
  for (const auto& [name, start] : layout) {
    const MigProfile* p = FindMigProfile(profiles, name);
    if (p == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPU ", gpu, " has no MIG profile '", name, "'"));
    }
    out.push_back({p, start});
    check.push_back({static_cast<int>(p - profiles.data()), start});
  }
  if (absl::Status s = ValidateMigLayout(profiles, check); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU ", gpu, ": layout ", Str(s.message())));
  }
  return out;
}

void SortByStart(std::vector<MigInstanceInfo>& v) {
  std::sort(v.begin(), v.end(),
            [](const MigInstanceInfo& a, const MigInstanceInfo& b) {
              return a.start < b.start;
            });
}

}  // namespace mig_internal

json MigStateJson(const MigState& state) {
  json instances = json::array();
  for (const MigInstanceInfo& in : state.instances) {
    instances.push_back(
        {{"profile", in.profile}, {"start", in.start}, {"uuid", in.uuid}});
  }
  return {{"capable", state.capable},
          {"mode", state.enabled ? "enabled" : "disabled"},
          {"pending", state.pending ? "enabled" : "disabled"},
          {"instances", std::move(instances)}};
}

int NvmlGpuInstanceProfileId(const MigProfile& p) {
  switch (p.compute_slices) {
    case 1:
      return p.memory_slices == 1 ? 0 : p.memory_slices == 2 ? 9 : -1;
    case 2:
      return p.memory_slices == 2 ? 1 : -1;
    case 3:
      return p.memory_slices == 4 ? 2 : -1;
    case 4:
      return p.memory_slices == 4 ? 3 : -1;
    case 7:
      return p.memory_slices == 8 ? 4 : -1;
    default:
      return -1;
  }
}

int NvmlComputeInstanceProfileId(int compute_slices) {
  switch (compute_slices) {
    case 1:
      return 0;
    case 2:
      return 1;
    case 3:
      return 2;
    case 4:
      return 3;
    case 7:
      return 4;
    default:
      return -1;
  }
}

// --- NVML ------------------------------------------------------------------

struct NvmlMigControl::Api {
  void* lib = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*get_handle)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*get_mig_mode)(NvmlDevice, unsigned int*,
                             unsigned int*) = nullptr;
  NvmlReturn (*set_mig_mode)(NvmlDevice, unsigned int, NvmlReturn*) = nullptr;
  NvmlReturn (*gi_profile_info)(NvmlDevice, unsigned int,
                                NvmlGpuInstanceProfileInfo*) = nullptr;
  NvmlReturn (*get_gis)(NvmlDevice, unsigned int, NvmlGpuInstance*,
                        unsigned int*) = nullptr;
  NvmlReturn (*gi_info)(NvmlGpuInstance, NvmlGpuInstanceInfo*) = nullptr;
  NvmlReturn (*get_cis)(NvmlGpuInstance, unsigned int, NvmlComputeInstance*,
                        unsigned int*) = nullptr;
  NvmlReturn (*destroy_ci)(NvmlComputeInstance) = nullptr;
  NvmlReturn (*destroy_gi)(NvmlGpuInstance) = nullptr;
  NvmlReturn (*create_gi)(NvmlDevice, unsigned int,
                          const NvmlGpuInstancePlacement*,
                          NvmlGpuInstance*) = nullptr;
  NvmlReturn (*ci_profile_info)(NvmlGpuInstance, unsigned int, unsigned int,
                                NvmlComputeInstanceProfileInfo*) = nullptr;
  NvmlReturn (*create_ci)(NvmlGpuInstance, unsigned int,
                          NvmlComputeInstance*) = nullptr;
  NvmlReturn (*max_mig_devices)(NvmlDevice, unsigned int*) = nullptr;
  NvmlReturn (*mig_device)(NvmlDevice, unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*gi_id_of)(NvmlDevice, unsigned int*) = nullptr;
  NvmlReturn (*get_uuid)(NvmlDevice, char*, unsigned int) = nullptr;

  ~Api() {
    if (shutdown != nullptr) shutdown();
    if (lib != nullptr) dlclose(lib);
  }

  std::string Describe(NvmlReturn rc) const {
    const char* text = error_string != nullptr ? error_string(rc) : nullptr;
    return text != nullptr ? absl::StrCat(text, " (", rc, ")")
                           : absl::StrCat("NVML error ", rc);
  }
  // `Internal` "GPU g: CALL: why".
  absl::Status Fail(int gpu, const char* call, NvmlReturn rc) const {
    return absl::InternalError(
        absl::StrCat("GPU ", gpu, ": ", call, ": ", Describe(rc)));
  }

  // A GPU instance as NVML lists it.
  struct Gi {
    NvmlGpuInstance handle;
    unsigned int id;
    unsigned int profile_id;
    int start;
  };

  // GPU `gpu`'s MIG mode now and after the next activation; `*capable`
  // false (and OK) when NVML says the GPU has no MIG.
  absl::Status Mode(int gpu, NvmlDevice device, bool* capable,
                    unsigned int* current, unsigned int* pending) const {
    *current = *pending = 0;
    const NvmlReturn rc = get_mig_mode(device, current, pending);
    *capable = rc != kNvmlErrorNotSupported;
    if (rc == kNvmlSuccess || rc == kNvmlErrorNotSupported) {
      return absl::OkStatus();
    }
    return Fail(gpu, "nvmlDeviceGetMigMode", rc);
  }

  absl::StatusOr<NvmlDevice> Device(int gpu) const {
    NvmlDevice device = nullptr;
    if (NvmlReturn rc = get_handle(static_cast<unsigned int>(gpu), &device);
        rc != kNvmlSuccess) {
      return Fail(gpu, "nvmlDeviceGetHandleByIndex_v2", rc);
    }
    return device;
  }

  // Every GPU instance of `device`, of every profile the GPU has.
  absl::StatusOr<std::vector<Gi>> GpuInstances(int gpu,
                                               NvmlDevice device) const {
    std::vector<Gi> out;
    for (unsigned int p = 0; p < kGpuInstanceProfiles; ++p) {
      NvmlGpuInstanceProfileInfo info{};
      // Profiles this GPU does not have answer NOT_SUPPORTED (or
      // INVALID_ARGUMENT on older drivers): skipped.
      if (gi_profile_info(device, p, &info) != kNvmlSuccess) continue;
      NvmlGpuInstance handles[kMaxInstances] = {};
      unsigned int count = 0;
      if (NvmlReturn rc = get_gis(device, info.id, handles, &count);
          rc != kNvmlSuccess) {
        return Fail(gpu, "nvmlDeviceGetGpuInstances", rc);
      }
      for (unsigned int i = 0; i < count && i < kMaxInstances; ++i) {
        NvmlGpuInstanceInfo gi{};
        if (NvmlReturn rc = gi_info(handles[i], &gi); rc != kNvmlSuccess) {
          return Fail(gpu, "nvmlGpuInstanceGetInfo", rc);
        }
        out.push_back({handles[i], gi.id, gi.profile_id,
                       static_cast<int>(gi.placement.start)});
      }
    }
    return out;
  }

  // GPU instance id -> the MIG device UUID of its compute instance.
  absl::StatusOr<std::map<unsigned int, std::string>> Uuids(
      int gpu, NvmlDevice device) const {
    std::map<unsigned int, std::string> out;
    unsigned int count = 0;
    if (NvmlReturn rc = max_mig_devices(device, &count); rc != kNvmlSuccess) {
      return Fail(gpu, "nvmlDeviceGetMaxMigDeviceCount", rc);
    }
    for (unsigned int i = 0; i < count; ++i) {
      NvmlDevice mig = nullptr;
      NvmlReturn rc = mig_device(device, i, &mig);
      if (rc == kNvmlErrorNotFound) continue;  // no MIG device at i
      if (rc != kNvmlSuccess) {
        return Fail(gpu, "nvmlDeviceGetMigDeviceHandleByIndex", rc);
      }
      unsigned int gi = 0;
      if (rc = gi_id_of(mig, &gi); rc != kNvmlSuccess) {
        return Fail(gpu, "nvmlDeviceGetGpuInstanceId", rc);
      }
      char uuid[kUuidBufferSize] = {};
      if (rc = get_uuid(mig, uuid, sizeof(uuid)); rc != kNvmlSuccess) {
        return Fail(gpu, "nvmlDeviceGetUUID", rc);
      }
      uuid[sizeof(uuid) - 1] = '\0';
      out.emplace(gi, uuid);  // the first compute instance's
    }
    return out;
  }

  absl::StatusOr<std::vector<MigInstanceInfo>> Instances(
      int gpu, NvmlDevice device, const std::vector<MigProfile>& profiles,
      std::vector<Gi>* gis = nullptr) const {
    absl::StatusOr<std::vector<Gi>> listed = GpuInstances(gpu, device);
    if (!listed.ok()) return listed.status();
    absl::StatusOr<std::map<unsigned int, std::string>> uuids =
        Uuids(gpu, device);
    if (!uuids.ok()) return uuids.status();
    std::vector<MigInstanceInfo> out;
    for (const Gi& gi : *listed) {
      auto it = uuids->find(gi.id);
      out.push_back({ProfileName(profiles, gi.profile_id), gi.start,
                     it == uuids->end() ? "" : it->second,
                     static_cast<int>(gi.id)});
    }
    if (gis != nullptr) *gis = *std::move(listed);
    SortByStart(out);
    return out;
  }

  absl::Status CreateComputeInstance(int gpu, NvmlGpuInstance gi,
                                     int compute_slices) const {
    NvmlComputeInstanceProfileInfo info{};
    const int profile = NvmlComputeInstanceProfileId(compute_slices);
    if (NvmlReturn rc = ci_profile_info(gi, static_cast<unsigned int>(profile),
                                        kComputeEngineShared, &info);
        rc != kNvmlSuccess) {
      return Fail(gpu, "nvmlGpuInstanceGetComputeInstanceProfileInfo", rc);
    }
    NvmlComputeInstance ci = nullptr;
    if (NvmlReturn rc = create_ci(gi, info.id, &ci); rc != kNvmlSuccess) {
      return Fail(gpu, "nvmlGpuInstanceCreateComputeInstance", rc);
    }
    return absl::OkStatus();
  }

  absl::Status DestroyGpuInstance(int gpu, NvmlGpuInstance gi) const {
    for (unsigned int p = 0; p < kComputeInstanceProfiles; ++p) {
      NvmlComputeInstance cis[kMaxInstances] = {};
      unsigned int count = 0;
      NvmlReturn rc = get_cis(gi, p, cis, &count);
      if (rc == kNvmlErrorNotSupported) continue;  // not a profile of gi
      if (rc != kNvmlSuccess) {
        return Fail(gpu, "nvmlGpuInstanceGetComputeInstances", rc);
      }
      for (unsigned int i = 0; i < count && i < kMaxInstances; ++i) {
        if (rc = destroy_ci(cis[i]); rc != kNvmlSuccess) {
          return Fail(gpu, "nvmlComputeInstanceDestroy", rc);
        }
      }
    }
    if (NvmlReturn rc = destroy_gi(gi); rc != kNvmlSuccess) {
      return Fail(gpu, "nvmlGpuInstanceDestroy", rc);
    }
    return absl::OkStatus();
  }
};

NvmlMigControl::NvmlMigControl(std::vector<GpuDevice> gpus, std::string library)
    : gpus_(std::move(gpus)), library_(std::move(library)) {}

NvmlMigControl::~NvmlMigControl() = default;

namespace {

template <typename Fn>
void BindSymbol(void* lib, const char* name, Fn& fn,
                std::vector<std::string>& missing) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (fn == nullptr) missing.push_back(name);
}

}  // namespace

namespace {

std::vector<MigProfile> ProfilesOf(const std::vector<GpuDevice>& gpus,
                                   int gpu) {
  for (const GpuDevice& g : gpus) {
    if (g.index == gpu) return MigProfilesFor(g.model, g.memory_bytes);
  }
  return {};
}

}  // namespace

// Loads the library once (`Unavailable` when it cannot, or lacks a MIG
// call: a driver too old for MIG), and keeps NVML initialised.
absl::Status NvmlMigControl::Load() {
  if (api_ != nullptr) return absl::OkStatus();
  auto api = std::make_unique<Api>();
  dlerror();
  api->lib = dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->lib == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(
        absl::StrCat("MIG: cannot load ", library_, " (",
                     why != nullptr ? why : "unknown error", ")"));
  }
  std::vector<std::string> missing;
  void* lib = api->lib;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  BindSymbol(lib, "nvmlInit_v2", init, missing);
  BindSymbol(lib, "nvmlShutdown", shutdown, missing);
  api->error_string = reinterpret_cast<const char* (*)(NvmlReturn)>(
      dlsym(lib, "nvmlErrorString"));
  BindSymbol(lib, "nvmlDeviceGetHandleByIndex_v2", api->get_handle, missing);
  BindSymbol(lib, "nvmlDeviceGetMigMode", api->get_mig_mode, missing);
  BindSymbol(lib, "nvmlDeviceSetMigMode", api->set_mig_mode, missing);
  BindSymbol(lib, "nvmlDeviceGetGpuInstanceProfileInfo", api->gi_profile_info,
             missing);
  BindSymbol(lib, "nvmlDeviceGetGpuInstances", api->get_gis, missing);
  BindSymbol(lib, "nvmlGpuInstanceGetInfo", api->gi_info, missing);
  BindSymbol(lib, "nvmlGpuInstanceGetComputeInstances", api->get_cis, missing);
  BindSymbol(lib, "nvmlComputeInstanceDestroy", api->destroy_ci, missing);
  BindSymbol(lib, "nvmlGpuInstanceDestroy", api->destroy_gi, missing);
  BindSymbol(lib, "nvmlDeviceCreateGpuInstanceWithPlacement", api->create_gi,
             missing);
  BindSymbol(lib, "nvmlGpuInstanceGetComputeInstanceProfileInfo",
             api->ci_profile_info, missing);
  BindSymbol(lib, "nvmlGpuInstanceCreateComputeInstance", api->create_ci,
             missing);
  BindSymbol(lib, "nvmlDeviceGetMaxMigDeviceCount", api->max_mig_devices,
             missing);
  BindSymbol(lib, "nvmlDeviceGetMigDeviceHandleByIndex", api->mig_device,
             missing);
  BindSymbol(lib, "nvmlDeviceGetGpuInstanceId", api->gi_id_of, missing);
  BindSymbol(lib, "nvmlDeviceGetUUID", api->get_uuid, missing);
  if (!missing.empty()) {
    return absl::UnavailableError(
        absl::StrCat("MIG: ", library_, " has no function ", missing.front(),
                     " (driver too old for MIG?)"));
  }
  if (NvmlReturn rc = init(); rc != kNvmlSuccess) {
    return absl::UnavailableError(
        absl::StrCat("MIG: nvmlInit_v2: ", api->Describe(rc)));
  }
  api->shutdown = shutdown;  // from now on, the destructor shuts NVML down
  api_ = std::move(api);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<MigInstanceInfo>> NvmlMigControl::Ensure(
    int gpu, const MigLayout& layout) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Load(); !s.ok()) return s;
  const std::vector<MigProfile> profiles = ProfilesOf(gpus_, gpu);
  absl::StatusOr<std::vector<Resolved>> wanted =
      ResolveLayout(gpu, profiles, layout);
  if (!wanted.ok()) return wanted.status();
  absl::StatusOr<NvmlDevice> device = api_->Device(gpu);
  if (!device.ok()) return device.status();
  unsigned int current = 0, pending = 0;
  NvmlReturn rc = api_->get_mig_mode(*device, &current, &pending);
  if (rc == kNvmlErrorNotSupported) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPU ", gpu, " is not MIG-capable (nvmlDeviceGetMigMode: ",
                     api_->Describe(rc), ")"));
  }
  if (rc != kNvmlSuccess) return api_->Fail(gpu, "nvmlDeviceGetMigMode", rc);
  // Also when it is on and a change to off waits (`Disable` left it so):
  // asking for on again takes that change back.
  if (current != kNvmlDeviceMigEnable || pending != kNvmlDeviceMigEnable) {
    NvmlReturn activation = kNvmlSuccess;
    if (rc = api_->set_mig_mode(*device, kNvmlDeviceMigEnable, &activation);
        rc != kNvmlSuccess) {
      return absl::FailedPreconditionError(
          absl::StrCat("GPU ", gpu, ": cannot enable MIG mode: ",
                       "nvmlDeviceSetMigMode: ", api_->Describe(rc)));
    }
    if (rc = api_->get_mig_mode(*device, &current, &pending);
        rc != kNvmlSuccess) {
      return api_->Fail(gpu, "nvmlDeviceGetMigMode", rc);
    }
    if (current != kNvmlDeviceMigEnable) {
      return absl::FailedPreconditionError(absl::StrCat(
          "GPU ", gpu,
          ": MIG mode is enabled only after a GPU reset (nvmlDeviceSetMigMode "
          "activation: ",
          api_->Describe(activation),
          "); reset the GPU with no process on it"));
    }
  }
  std::vector<Api::Gi> gis;
  absl::StatusOr<std::vector<MigInstanceInfo>> now =
      api_->Instances(gpu, *device, profiles, &gis);
  if (!now.ok()) return now.status();
  // Which existing instances stay (each wanted one at most once).
  std::vector<bool> found(wanted->size(), false);
  std::vector<const Api::Gi*> doomed;
  std::vector<std::pair<const Api::Gi*, const MigProfile*>> kept;
  for (const Api::Gi& gi : gis) {
    bool keep = false;
    for (size_t i = 0; i < wanted->size() && !keep; ++i) {
      const Resolved& w = (*wanted)[i];
      if (!found[i] && w.start == gi.start &&
          NvmlGpuInstanceProfileId(*w.profile) ==
              static_cast<int>(gi.profile_id)) {
        found[i] = keep = true;
        kept.emplace_back(&gi, w.profile);
      }
    }
    if (!keep) doomed.push_back(&gi);
  }
  for (const Api::Gi* gi : doomed) {
    if (absl::Status s = api_->DestroyGpuInstance(gpu, gi->handle); !s.ok()) {
      return s;
    }
  }
  bool changed = !doomed.empty();
  // A kept instance without a compute instance (made by hand) gets one.
  for (const auto& entry : kept) {
    // Named copies: clang 14 does not let a lambda capture a structured
    // binding.
    const auto* gi = entry.first;
    const auto* profile = entry.second;
    const bool has_ci =
        std::any_of(now->begin(), now->end(), [&](const MigInstanceInfo& in) {
          return in.start == gi->start && !in.uuid.empty();
        });
    if (has_ci) continue;
    changed = true;
    if (absl::Status s = api_->CreateComputeInstance(gpu, gi->handle,
                                                     profile->compute_slices);
        !s.ok()) {
      return s;
    }
  }
  for (size_t i = 0; i < wanted->size(); ++i) {
    if (found[i]) continue;
    changed = true;
    const Resolved& w = (*wanted)[i];
    const int id = NvmlGpuInstanceProfileId(*w.profile);
    NvmlGpuInstanceProfileInfo info{};
    if (rc = api_->gi_profile_info(*device, static_cast<unsigned int>(id),
                                   &info);
        rc != kNvmlSuccess) {
      return api_->Fail(gpu, "nvmlDeviceGetGpuInstanceProfileInfo", rc);
    }
    const NvmlGpuInstancePlacement placement{
        static_cast<unsigned int>(w.start),
        static_cast<unsigned int>(w.profile->memory_slices)};
    NvmlGpuInstance gi = nullptr;
    if (rc = api_->create_gi(*device, info.id, &placement, &gi);
        rc != kNvmlSuccess) {
      return absl::InternalError(absl::StrCat(
          "GPU ", gpu, ": nvmlDeviceCreateGpuInstanceWithPlacement (",
          w.profile->name, " at memory slice ", w.start,
          "): ", api_->Describe(rc)));
    }
    if (absl::Status s =
            api_->CreateComputeInstance(gpu, gi, w.profile->compute_slices);
        !s.ok()) {
      return s;
    }
  }
  if (!changed) return now;  // the layout was there: nothing was called
  return api_->Instances(gpu, *device, profiles);
}

absl::StatusOr<std::vector<MigInstanceInfo>> NvmlMigControl::List(int gpu) {
  absl::StatusOr<MigState> state = Describe(gpu);
  if (!state.ok()) return state.status();
  return state->instances;
}

struct NvmlMigControl::ModeNow {
  NvmlDevice device = nullptr;
  bool capable = false;
  unsigned int current = 0;
  unsigned int pending = 0;
};

absl::StatusOr<NvmlMigControl::ModeNow> NvmlMigControl::ReadMode(int gpu) {
  if (absl::Status s = Load(); !s.ok()) return s;
  absl::StatusOr<NvmlDevice> device = api_->Device(gpu);
  if (!device.ok()) return device.status();
  ModeNow mode{.device = *device};
  if (absl::Status s = api_->Mode(gpu, mode.device, &mode.capable,
                                  &mode.current, &mode.pending);
      !s.ok()) {
    return s;
  }
  return mode;
}

absl::StatusOr<MigState> NvmlMigControl::Describe(int gpu) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ModeNow> mode = ReadMode(gpu);
  if (!mode.ok()) return mode.status();
  MigState state;
  state.capable = mode->capable;
  if (!state.capable) return state;
  state.enabled = mode->current == kNvmlDeviceMigEnable;
  state.pending = mode->pending == kNvmlDeviceMigEnable;
  if (!state.enabled) return state;
  absl::StatusOr<std::vector<MigInstanceInfo>> instances =
      api_->Instances(gpu, mode->device, ProfilesOf(gpus_, gpu));
  if (!instances.ok()) return instances.status();
  state.instances = *std::move(instances);
  return state;
}

absl::StatusOr<MigState> NvmlMigControl::Disable(int gpu) {
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<ModeNow> mode = ReadMode(gpu);
    if (!mode.ok()) return mode.status();
    if (!mode->capable) return MigState{};
    if (mode->current == kNvmlDeviceMigDisable &&
        mode->pending == kNvmlDeviceMigDisable) {
      return MigState{.capable = true};
    }
    if (mode->current == kNvmlDeviceMigEnable) {
      std::vector<Api::Gi> gis;
      absl::StatusOr<std::vector<MigInstanceInfo>> now =
          api_->Instances(gpu, mode->device, ProfilesOf(gpus_, gpu), &gis);
      if (!now.ok()) return now.status();
      for (const Api::Gi& gi : gis) {
        if (absl::Status s = api_->DestroyGpuInstance(gpu, gi.handle);
            !s.ok()) {
          return s;
        }
      }
    }
    NvmlReturn activation = kNvmlSuccess;
    if (NvmlReturn rc = api_->set_mig_mode(mode->device, kNvmlDeviceMigDisable,
                                           &activation);
        rc != kNvmlSuccess) {
      return absl::FailedPreconditionError(
          absl::StrCat("GPU ", gpu, ": cannot disable MIG mode: ",
                       "nvmlDeviceSetMigMode: ", api_->Describe(rc)));
    }
  }
  return Describe(gpu);
}

absl::StatusOr<MigState> NvmlMigControl::Settle(int gpu) {
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<ModeNow> mode = ReadMode(gpu);
    if (!mode.ok()) return mode.status();
    if (!mode->capable) return MigState{};
    if (mode->current != mode->pending) {
      NvmlReturn activation = kNvmlSuccess;
      if (NvmlReturn rc =
              api_->set_mig_mode(mode->device, mode->pending, &activation);
          rc != kNvmlSuccess) {
        return api_->Fail(gpu, "nvmlDeviceSetMigMode", rc);
      }
    }
  }
  return Describe(gpu);
}

}  // namespace loom
