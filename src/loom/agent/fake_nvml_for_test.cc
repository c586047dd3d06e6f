// A stand-in for libnvidia-ml.so.1, loaded by agent_test through
// `NvmlGpuProbe` to check the dlopen/dlsym path without a GPU. It exports the
// functions the probe uses, with NVML's C signatures (nvml.h), and describes
// two "NVIDIA H200" GPUs.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace {

struct FakeDevice {
  int index;
};

FakeDevice g_devices[2] = {{0}, {1}};
int g_initialized = 0;

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
