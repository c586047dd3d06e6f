// A stand-in for libnvidia-ml.so.1, loaded by agent_test through
// `NvmlGpuProbe` to check the dlopen/dlsym path without a GPU. It exports the
// functions the probe uses, with NVML's C signatures (nvml.h), and describes
// two "NVIDIA H200" GPUs. They are MIG-capable (mig_control.h): MIG mode off
// and no instances whenever the library is initialised afresh; each MIG call
// is appended as a line to the file `LOOM_FAKE_NVML_LOG` names, when set.
// While `LOOM_FAKE_NVML_MIG_HELD` names a GPU index, another process holds
// that GPU open: a change of its MIG mode is left pending (the activation
// status is NVML_ERROR_IN_USE), until a later call finds it no longer held.

#include <fcntl.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace {

struct FakeDevice {
  int index;
  int mig_slot;  // -1: the GPU itself; else a MIG device of its instance
};

FakeDevice g_devices[2] = {{0, -1}, {1, -1}};
int g_initialized = 0;

// MIG (defined below, with the MIG calls).
void ResetMig();
int MigDeviceUuid(const FakeDevice* mig, char* uuid, unsigned int length);

int CopyString(const char* text, char* out, unsigned int length) {
  if (out == nullptr || length == 0) return 2;   // NVML_ERROR_INVALID_ARGUMENT
  if (std::strlen(text) + 1 > length) return 7;  // INSUFFICIENT_SIZE
  std::strcpy(out, text);
  return 0;
}

}  // namespace

extern "C" {

struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

int nvmlInit_v2(void) {
  if (g_initialized == 0) ResetMig();
  ++g_initialized;
  return 0;
}

int nvmlShutdown(void) {
  if (g_initialized == 0) return 1;  // NVML_ERROR_UNINITIALIZED
  --g_initialized;
  return 0;
}

const char* nvmlErrorString(int result) {
  return result == 0 ? "Success" : "Fake NVML error";
}

int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (g_initialized == 0) return 1;
  *count = 2;
  return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (g_initialized == 0) return 1;
  if (index >= 2 || device == nullptr) return 2;
  *device = &g_devices[index];
  return 0;
}

int nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  if (device == nullptr) return 2;
  return CopyString("NVIDIA H200", name, length);
}

int nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length) {
  if (device == nullptr) return 2;
  if (static_cast<FakeDevice*>(device)->mig_slot >= 0) {
    return MigDeviceUuid(static_cast<FakeDevice*>(device), uuid, length);
  }
  char text[64];
  std::snprintf(text, sizeof(text), "GPU-00000000-0000-0000-0000-00000000000%d",
                static_cast<FakeDevice*>(device)->index);
  return CopyString(text, uuid, length);
}

int nvmlDeviceGetMemoryInfo(void* device, nvmlMemory_st* memory) {
  if (device == nullptr || memory == nullptr) return 2;
  memory->total = 150754820096ULL;  // what an H200 reports (140.4 GiB)
  memory->used = 0;
  memory->free = memory->total;
  return 0;
}

struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
};

// Telemetry: fixed values per GPU index, so tests can check the path.
int nvmlDeviceGetUtilizationRates(void* device, nvmlUtilization_st* util) {
  if (device == nullptr || util == nullptr) return 2;
  util->gpu = 40 + static_cast<FakeDevice*>(device)->index;
  util->memory = 10;
  return 0;
}

int nvmlDeviceGetTemperature(void* device, int sensor, unsigned int* temp) {
  if (device == nullptr || temp == nullptr || sensor != 0) return 2;
  *temp = 55;
  return 0;
}

int nvmlDeviceGetPowerUsage(void* device, unsigned int* milliwatts) {
  if (device == nullptr || milliwatts == nullptr) return 2;
  *milliwatts = 250500;
  return 0;
}

int nvmlDeviceGetClockInfo(void* device, int type, unsigned int* mhz) {
  if (device == nullptr || mhz == nullptr || type != 1) return 2;
  *mhz = 1980;
  return 0;
}

// Minor numbers that are not the indices (as on hosts where they differ):
// The driver 550.54.15, supporting CUDA 12.4.
int nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return CopyString("550.54.15", version, length);
}
int nvmlSystemGetCudaDriverVersion_v2(int* version) {
  if (version == nullptr) return 2;
  *version = 12040;
  return 0;
}

// GPU i is /dev/nvidia(i + 4).
int nvmlDeviceGetMinorNumber(void* device, unsigned int* minor) {
  if (device == nullptr || minor == nullptr) return 2;
  *minor =
      static_cast<unsigned int>(static_cast<FakeDevice*>(device)->index) + 4;
  return 0;
}

// Xid events: GPU 1 reports the Xid in LOOM_FAKE_NVML_XID once, then the
// wait times out (NVML_ERROR_TIMEOUT).
struct nvmlEventData_st {
  void* device;
  unsigned long long event_type;
  unsigned long long event_data;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
int g_event_set = 0;
bool g_xid_sent = false;

int nvmlEventSetCreate(void** set) {
  if (set == nullptr) return 2;
  *set = &g_event_set;
  return 0;
}

int nvmlDeviceRegisterEvents(void* device, unsigned long long types,
                             void* set) {
  if (device == nullptr || set == nullptr || (types & 0x8) == 0) return 2;
  return 0;
}

int nvmlEventSetWait_v2(void* set, nvmlEventData_st* data, unsigned int ms) {
  if (set == nullptr || data == nullptr) return 2;
  const char* xid = std::getenv("LOOM_FAKE_NVML_XID");
  if (xid != nullptr && !g_xid_sent) {
    g_xid_sent = true;
    data->device = &g_devices[1];
    data->event_type = 0x8;
    data->event_data = std::strtoull(xid, nullptr, 10);
    return 0;
  }
  struct timespec ts = {static_cast<time_t>(ms / 1000),
                        static_cast<long>(ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
  return 10;  // NVML_ERROR_TIMEOUT
}

int nvmlEventSetFree(void* set) { return set == nullptr ? 2 : 0; }

// Uncorrected volatile ECC errors: GPU 1 reports the count in
// LOOM_FAKE_NVML_ECC (default 0), so tests can make one GPU unhealthy.
int nvmlDeviceGetTotalEccErrors(void* device, int error_type, int counter_type,
                                unsigned long long* count) {
  if (device == nullptr || count == nullptr) return 2;
  if (error_type != 1 || counter_type != 0) return 3;  // NOT_SUPPORTED
  const char* env = std::getenv("LOOM_FAKE_NVML_ECC");
  *count = static_cast<FakeDevice*>(device)->index == 1 && env != nullptr
               ? std::strtoull(env, nullptr, 10)
               : 0;
  return 0;
}

}  // extern "C"

// --- MIG -------------------------------------------------------------------
//
// Each GPU has 8 memory and 7 compute slices, the H200's GPU instance
// profiles (NVML ids 0 = 1_SLICE, 9 = 1_SLICE_REV2, 1 = 2_SLICE, 2 =
// 3_SLICE, 3 = 4_SLICE, 4 = 7_SLICE) with their placements, and at most
// one compute instance per GPU instance. Handles point into static arrays.

namespace {

constexpr int kSlots = 8;
constexpr int kNotSupported = 3;
constexpr int kNotFound = 6;
constexpr int kInUse = 19;
constexpr int kInsufficientResources = 23;

struct FakeGi {
  int gpu;
  int slot;
  bool used;
  unsigned id;
  unsigned profile;
  unsigned start;
  unsigned size;
  unsigned compute;
  bool has_ci;
  unsigned ci_profile;
  unsigned serial;  // of its compute instance, for its UUID
};
struct FakeCi {
  int gpu;
  int slot;
};
struct FakeMigGpu {
  unsigned current;
  unsigned pending;
  FakeGi gis[kSlots];
};

FakeMigGpu g_mig[2];
FakeCi g_cis[2][kSlots];
FakeDevice g_mig_devices[2][kSlots];
unsigned g_serial = 0;

void ResetMig() {
  for (int g = 0; g < 2; ++g) {
    g_mig[g].current = g_mig[g].pending = 0;
    for (int s = 0; s < kSlots; ++s) {
      g_mig[g].gis[s] = FakeGi{};
      g_mig[g].gis[s].gpu = g;
      g_mig[g].gis[s].slot = s;
      g_cis[g][s] = FakeCi{g, s};
      g_mig_devices[g][s] = FakeDevice{g, s};
    }
  }
}

// One line to `LOOM_FAKE_NVML_LOG`, in one write.
void Log(const char* format, ...) {
  const char* path = std::getenv("LOOM_FAKE_NVML_LOG");
  if (path == nullptr || path[0] == '\0') return;
  char line[256];
  va_list args;
  va_start(args, format);
  int n = std::vsnprintf(line, sizeof(line) - 1, format, args);
  va_end(args);
  if (n < 0) return;
  if (n > static_cast<int>(sizeof(line)) - 2) n = sizeof(line) - 2;
  line[n++] = '\n';
  const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  (void)!write(fd, line, static_cast<size_t>(n));
  close(fd);
}

// The geometry of NVML GPU instance profile `profile`: compute slices,
// memory slices, instances, allowed starts (a bit each); false if none.
bool Geometry(unsigned profile, unsigned* compute, unsigned* size,
              unsigned* count, unsigned* starts) {
  struct Row {
    unsigned profile, compute, size, count, starts;
  };
  constexpr Row kRows[] = {{0, 1, 1, 7, 0x7f}, {9, 1, 2, 4, 0x55},
                           {1, 2, 2, 3, 0x15}, {2, 3, 4, 2, 0x11},
                           {3, 4, 4, 1, 0x01}, {4, 7, 8, 1, 0x01}};
  for (const Row& r : kRows) {
    if (r.profile != profile) continue;
    *compute = r.compute;
    *size = r.size;
    *count = r.count;
    *starts = r.starts;
    return true;
  }
  return false;
}

int GpuOf(void* device) {
  if (device == nullptr) return -1;
  const FakeDevice* d = static_cast<FakeDevice*>(device);
  return d->mig_slot < 0 && d->index >= 0 && d->index < 2 ? d->index : -1;
}

int MigDeviceUuid(const FakeDevice* mig, char* uuid, unsigned int length) {
  const FakeGi& gi = g_mig[mig->index].gis[mig->mig_slot];
  Log("nvmlDeviceGetUUID gpu=%d gi=%u", mig->index, gi.id);
  if (!gi.used || !gi.has_ci) return kNotFound;
  char text[64];
  std::snprintf(text, sizeof(text), "MIG-fa4e%04x-%04x-4000-8000-%012x",
                static_cast<unsigned>(mig->index), gi.id, gi.serial);
  return CopyString(text, uuid, length);
}

}  // namespace

extern "C" {

struct nvmlGpuInstancePlacement_st {
  unsigned int start;
  unsigned int size;
};
struct nvmlGpuInstanceProfileInfo_st {
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
};
struct nvmlGpuInstanceInfo_st {
  void* device;
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_st placement;
};
struct nvmlComputeInstanceProfileInfo_st {
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
};

int nvmlDeviceGetMigMode(void* device, unsigned int* current,
                         unsigned int* pending) {
  const int g = GpuOf(device);
  if (g < 0 || current == nullptr || pending == nullptr) return 2;
  Log("nvmlDeviceGetMigMode gpu=%d", g);
  *current = g_mig[g].current;
  *pending = g_mig[g].pending;
  return 0;
}

int nvmlDeviceSetMigMode(void* device, unsigned int mode, int* activation) {
  const int g = GpuOf(device);
  if (g < 0 || activation == nullptr || mode > 1) return 2;
  Log("nvmlDeviceSetMigMode gpu=%d mode=%u", g, mode);
  for (const FakeGi& gi : g_mig[g].gis) {
    if (mode == 0 && gi.used) return kInUse;
  }
  g_mig[g].pending = mode;
  const char* held = std::getenv("LOOM_FAKE_NVML_MIG_HELD");
  if (held != nullptr && std::atoi(held) == g) {
    *activation = kInUse;
    return 0;
  }
  g_mig[g].current = mode;
  *activation = 0;
  return 0;
}

int nvmlDeviceGetGpuInstanceProfileInfo(void* device, unsigned int profile,
                                        nvmlGpuInstanceProfileInfo_st* info) {
  const int g = GpuOf(device);
  if (g < 0 || info == nullptr) return 2;
  Log("nvmlDeviceGetGpuInstanceProfileInfo gpu=%d profile=%u", g, profile);
  unsigned compute, size, count, starts;
  if (!Geometry(profile, &compute, &size, &count, &starts)) {
    return kNotSupported;
  }
  *info = nvmlGpuInstanceProfileInfo_st{};
  info->id = profile;
  info->sliceCount = compute;
  info->instanceCount = count;
  info->memorySizeMB = 17920ULL * size;
  return 0;
}

int nvmlDeviceGetGpuInstances(void* device, unsigned int profile,
                              void** instances, unsigned int* count) {
  const int g = GpuOf(device);
  if (g < 0 || count == nullptr || instances == nullptr) return 2;
  Log("nvmlDeviceGetGpuInstances gpu=%d profile=%u", g, profile);
  if (g_mig[g].current != 1) return kNotSupported;
  unsigned n = 0;
  for (FakeGi& gi : g_mig[g].gis) {
    if (gi.used && gi.profile == profile) instances[n++] = &gi;
  }
  *count = n;
  return 0;
}

int nvmlGpuInstanceGetInfo(void* handle, nvmlGpuInstanceInfo_st* info) {
  if (handle == nullptr || info == nullptr) return 2;
  const FakeGi& gi = *static_cast<FakeGi*>(handle);
  Log("nvmlGpuInstanceGetInfo gpu=%d gi=%u", gi.gpu, gi.id);
  if (!gi.used) return kNotFound;
  info->device = &g_devices[gi.gpu];
  info->id = gi.id;
  info->profileId = gi.profile;
  info->placement = {gi.start, gi.size};
  return 0;
}

int nvmlGpuInstanceGetComputeInstances(void* handle, unsigned int profile,
                                       void** instances, unsigned int* count) {
  if (handle == nullptr || instances == nullptr || count == nullptr) return 2;
  const FakeGi& gi = *static_cast<FakeGi*>(handle);
  Log("nvmlGpuInstanceGetComputeInstances gpu=%d gi=%u profile=%u", gi.gpu,
      gi.id, profile);
  if (profile > 7) return 2;
  *count = 0;
  if (gi.has_ci && gi.ci_profile == profile) {
    instances[0] = &g_cis[gi.gpu][gi.slot];
    *count = 1;
  }
  return 0;
}

int nvmlComputeInstanceDestroy(void* handle) {
  if (handle == nullptr) return 2;
  const FakeCi& ci = *static_cast<FakeCi*>(handle);
  FakeGi& gi = g_mig[ci.gpu].gis[ci.slot];
  Log("nvmlComputeInstanceDestroy gpu=%d gi=%u ci=0", ci.gpu, gi.id);
  if (!gi.has_ci) return kNotFound;
  gi.has_ci = false;
  return 0;
}

int nvmlGpuInstanceDestroy(void* handle) {
  if (handle == nullptr) return 2;
  FakeGi& gi = *static_cast<FakeGi*>(handle);
  Log("nvmlGpuInstanceDestroy gpu=%d gi=%u", gi.gpu, gi.id);
  if (!gi.used) return kNotFound;
  if (gi.has_ci) return kInUse;
  gi.used = false;
  return 0;
}

int nvmlDeviceCreateGpuInstanceWithPlacement(
    void* device, unsigned int profile,
    const nvmlGpuInstancePlacement_st* placement, void** out) {
  const int g = GpuOf(device);
  if (g < 0 || placement == nullptr || out == nullptr) return 2;
  Log("nvmlDeviceCreateGpuInstanceWithPlacement gpu=%d profile=%u start=%u "
      "size=%u",
      g, profile, placement->start, placement->size);
  if (g_mig[g].current != 1) return kNotSupported;
  unsigned compute, size, count, starts;
  if (!Geometry(profile, &compute, &size, &count, &starts)) {
    return kNotSupported;
  }
  if (placement->size != size || placement->start > 7 ||
      (starts & (1u << placement->start)) == 0) {
    return 2;
  }
  unsigned taken = 0, computes = 0, used_ids = 0;
  FakeGi* free_slot = nullptr;
  for (FakeGi& gi : g_mig[g].gis) {
    if (!gi.used) {
      if (free_slot == nullptr) free_slot = &gi;
      continue;
    }
    taken |= ((1u << gi.size) - 1) << gi.start;
    computes += gi.compute;
    used_ids |= 1u << gi.id;
  }
  const unsigned mask = ((1u << size) - 1) << placement->start;
  if ((taken & mask) != 0 || computes + compute > 7 || free_slot == nullptr) {
    return kInsufficientResources;
  }
  unsigned id = 1;
  while ((used_ids & (1u << id)) != 0) ++id;
  free_slot->used = true;
  free_slot->id = id;
  free_slot->profile = profile;
  free_slot->start = placement->start;
  free_slot->size = size;
  free_slot->compute = compute;
  free_slot->has_ci = false;
  *out = free_slot;
  return 0;
}

int nvmlGpuInstanceGetComputeInstanceProfileInfo(
    void* handle, unsigned int profile, unsigned int engine,
    nvmlComputeInstanceProfileInfo_st* info) {
  if (handle == nullptr || info == nullptr || engine != 0) return 2;
  const FakeGi& gi = *static_cast<FakeGi*>(handle);
  Log("nvmlGpuInstanceGetComputeInstanceProfileInfo gpu=%d gi=%u profile=%u "
      "eng=%u",
      gi.gpu, gi.id, profile, engine);
  // Compute instance profiles 0..4 take 1, 2, 3, 4 and 7 slices.
  const unsigned slices[] = {1, 2, 3, 4, 7};
  if (profile > 4 || slices[profile] > gi.compute) return kNotSupported;
  *info = nvmlComputeInstanceProfileInfo_st{};
  info->id = profile;
  info->sliceCount = slices[profile];
  info->instanceCount = gi.compute / slices[profile];
  return 0;
}

int nvmlGpuInstanceCreateComputeInstance(void* handle, unsigned int profile,
                                         void** out) {
  if (handle == nullptr || out == nullptr) return 2;
  FakeGi& gi = *static_cast<FakeGi*>(handle);
  Log("nvmlGpuInstanceCreateComputeInstance gpu=%d gi=%u profile=%u", gi.gpu,
      gi.id, profile);
  if (!gi.used) return kNotFound;
  if (gi.has_ci) return kInsufficientResources;
  gi.has_ci = true;
  gi.ci_profile = profile;
  gi.serial = ++g_serial;
  *out = &g_cis[gi.gpu][gi.slot];
  return 0;
}

int nvmlDeviceGetMaxMigDeviceCount(void* device, unsigned int* count) {
  const int g = GpuOf(device);
  if (g < 0 || count == nullptr) return 2;
  Log("nvmlDeviceGetMaxMigDeviceCount gpu=%d", g);
  *count = 7;
  return 0;
}

int nvmlDeviceGetMigDeviceHandleByIndex(void* device, unsigned int index,
                                        void** mig) {
  const int g = GpuOf(device);
  if (g < 0 || mig == nullptr) return 2;
  Log("nvmlDeviceGetMigDeviceHandleByIndex gpu=%d index=%u", g, index);
  unsigned n = 0;
  for (const FakeGi& gi : g_mig[g].gis) {
    if (!gi.used || !gi.has_ci) continue;
    if (n++ == index) {
      *mig = &g_mig_devices[g][gi.slot];
      return 0;
    }
  }
  return kNotFound;
}

int nvmlDeviceGetGpuInstanceId(void* device, unsigned int* id) {
  if (device == nullptr || id == nullptr) return 2;
  const FakeDevice& d = *static_cast<FakeDevice*>(device);
  if (d.mig_slot < 0) return 2;  // not a MIG device
  const FakeGi& gi = g_mig[d.index].gis[d.mig_slot];
  Log("nvmlDeviceGetGpuInstanceId gpu=%d gi=%u", d.index, gi.id);
  *id = gi.id;
  return 0;
}

}  // extern "C"
