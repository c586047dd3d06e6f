#include "loom/agent/gpu_probe.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "loom/common/fnv.h"
#include "loom/common/units.h"

namespace loom {
namespace {

// The NVML declarations the probe needs (nvml.h; the library is loaded at
// run time, so the header is not needed to build). `nvmlReturn_t` is an
// enum, `nvmlDevice_t` an opaque pointer.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlMemory {  // nvmlMemory_t (v1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr unsigned kNvmlNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kNvmlUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

using NvmlInitFn = NvmlReturn (*)();
using NvmlShutdownFn = NvmlReturn (*)();
using NvmlErrorStringFn = const char* (*)(NvmlReturn);
using NvmlGetCountFn = NvmlReturn (*)(unsigned int*);
using NvmlGetHandleFn = NvmlReturn (*)(unsigned int, NvmlDevice*);
using NvmlGetStringFn = NvmlReturn (*)(NvmlDevice, char*, unsigned int);
using NvmlGetMemoryFn = NvmlReturn (*)(NvmlDevice, NvmlMemory*);
// nvmlDeviceGetTotalEccErrors(device, nvmlMemoryErrorType_t,
// nvmlEccCounterType_t, unsigned long long*).
using NvmlGetEccFn = NvmlReturn (*)(NvmlDevice, int, int, unsigned long long*);
constexpr int kNvmlMemoryErrorUncorrected = 1;  // ..._TYPE_UNCORRECTED
constexpr int kNvmlVolatileEcc = 0;             // NVML_VOLATILE_ECC
struct NvmlUtilization {                        // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};
using NvmlGetUtilizationFn = NvmlReturn (*)(NvmlDevice, NvmlUtilization*);
// nvmlDeviceGetTemperature(device, nvmlTemperatureSensors_t, unsigned*),
// nvmlDeviceGetClockInfo(device, nvmlClockType_t, unsigned*).
using NvmlGetUintOfFn = NvmlReturn (*)(NvmlDevice, int, unsigned int*);
using NvmlGetUintFn = NvmlReturn (*)(NvmlDevice, unsigned int*);
constexpr int kNvmlTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU
constexpr int kNvmlClockSm = 1;         // NVML_CLOCK_SM

class DlHandle {
 public:
  explicit DlHandle(void* handle) : handle_(handle) {}
  ~DlHandle() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  DlHandle(const DlHandle&) = delete;
  DlHandle& operator=(const DlHandle&) = delete;
  void* get() const { return handle_; }

 private:
  void* handle_;
};

template <typename Fn>
Fn Symbol(void* handle, const char* name) {
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

struct KnownModel {
  const char* model;
  int64_t gpu_memory_bytes;
  int cpus;
  int64_t memory_bytes;
};

constexpr int64_t kTiB = int64_t{1} << 40;

constexpr KnownModel kKnownModels[] = {
    {"h200", 141 * kGiB, 192, 2 * kTiB},
    {"a100", 80 * kGiB, 96, 1 * kTiB},
    {"h100", 80 * kGiB, 0, 0},
    {"l40s", 48 * kGiB, 0, 0},
};

bool ValidModelName(std::string_view model) {
  if (model.empty() || model.size() > 32) return false;
  return std::all_of(model.begin(), model.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

std::string Str(absl::string_view s) { return std::string(s.data(), s.size()); }

// The path the dynamic loader opened for `handle` (absolute), "" when it
// says none. glibc keeps the path it found by searching
// (/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1); a relative one is made
// absolute.
std::string LoadedPathOf(void* handle) {
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr ||
      map->l_name == nullptr || map->l_name[0] == '\0') {
    return "";
  }
  if (map->l_name[0] == '/') return map->l_name;
  char real[PATH_MAX];
  return ::realpath(map->l_name, real) != nullptr ? std::string(real) : "";
}

}  // namespace

NvmlGpuProbe::NvmlGpuProbe(std::string library)
    : library_(std::move(library)) {}

absl::StatusOr<std::vector<GpuDevice>> NvmlGpuProbe::Probe() {
  dlerror();
  DlHandle lib(dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (lib.get() == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(
        absl::StrCat("NVML is not available: cannot load ", library_, " (",
                     why != nullptr ? why : "unknown error",
                     "); this host has no NVIDIA driver"));
  }
  auto init = Symbol<NvmlInitFn>(lib.get(), "nvmlInit_v2");
  auto shutdown = Symbol<NvmlShutdownFn>(lib.get(), "nvmlShutdown");
  auto error_string = Symbol<NvmlErrorStringFn>(lib.get(), "nvmlErrorString");
  auto get_count = Symbol<NvmlGetCountFn>(lib.get(), "nvmlDeviceGetCount_v2");
  auto get_handle =
      Symbol<NvmlGetHandleFn>(lib.get(), "nvmlDeviceGetHandleByIndex_v2");
  auto get_name = Symbol<NvmlGetStringFn>(lib.get(), "nvmlDeviceGetName");
  auto get_uuid = Symbol<NvmlGetStringFn>(lib.get(), "nvmlDeviceGetUUID");
  auto get_memory =
      Symbol<NvmlGetMemoryFn>(lib.get(), "nvmlDeviceGetMemoryInfo");
  // Optional: GPUs without ECC answer NVML_ERROR_NOT_SUPPORTED.
  auto get_ecc = Symbol<NvmlGetEccFn>(lib.get(), "nvmlDeviceGetTotalEccErrors");
  auto get_util =
      Symbol<NvmlGetUtilizationFn>(lib.get(), "nvmlDeviceGetUtilizationRates");
  auto get_temp =
      Symbol<NvmlGetUintOfFn>(lib.get(), "nvmlDeviceGetTemperature");
  auto get_power = Symbol<NvmlGetUintFn>(lib.get(), "nvmlDeviceGetPowerUsage");
  auto get_clock = Symbol<NvmlGetUintOfFn>(lib.get(), "nvmlDeviceGetClockInfo");
  auto get_minor = Symbol<NvmlGetUintFn>(lib.get(), "nvmlDeviceGetMinorNumber");
  const std::pair<const char*, bool> required[] = {
      {"nvmlInit_v2", init != nullptr},
      {"nvmlShutdown", shutdown != nullptr},
      {"nvmlDeviceGetCount_v2", get_count != nullptr},
      {"nvmlDeviceGetHandleByIndex_v2", get_handle != nullptr},
      {"nvmlDeviceGetName", get_name != nullptr},
      {"nvmlDeviceGetUUID", get_uuid != nullptr},
      {"nvmlDeviceGetMemoryInfo", get_memory != nullptr},
  };
  for (const auto& [name, found] : required) {
    if (!found) {
      return absl::UnavailableError(
          absl::StrCat("NVML is not usable: ", library_, " has no function ",
                       name, " (driver too old?)"));
    }
  }
  auto describe = [&](NvmlReturn rc) {
    const char* text = error_string != nullptr ? error_string(rc) : nullptr;
    return text != nullptr ? absl::StrCat(text, " (", rc, ")")
                           : absl::StrCat("NVML error ", rc);
  };
  if (NvmlReturn rc = init(); rc != kNvmlSuccess) {
    return absl::UnavailableError(
        absl::StrCat("NVML is not usable: nvmlInit_v2: ", describe(rc)));
  }
  auto fail = [&](std::string message) {
    shutdown();
    return absl::InternalError(std::move(message));
  };
  unsigned int count = 0;
  if (NvmlReturn rc = get_count(&count); rc != kNvmlSuccess) {
    return fail(absl::StrCat("nvmlDeviceGetCount_v2: ", describe(rc)));
  }
  std::vector<GpuDevice> gpus;
  for (unsigned int i = 0; i < count; ++i) {
    NvmlDevice device = nullptr;
    if (NvmlReturn rc = get_handle(i, &device); rc != kNvmlSuccess) {
      return fail(absl::StrCat(
          "GPU ", i, ": nvmlDeviceGetHandleByIndex_v2: ", describe(rc)));
    }
    char name[kNvmlNameBufferSize] = {};
    if (NvmlReturn rc = get_name(device, name, sizeof(name));
        rc != kNvmlSuccess) {
      return fail(
          absl::StrCat("GPU ", i, ": nvmlDeviceGetName: ", describe(rc)));
    }
    char uuid[kNvmlUuidBufferSize] = {};
    if (NvmlReturn rc = get_uuid(device, uuid, sizeof(uuid));
        rc != kNvmlSuccess) {
      return fail(
          absl::StrCat("GPU ", i, ": nvmlDeviceGetUUID: ", describe(rc)));
    }
    NvmlMemory memory{};
    if (NvmlReturn rc = get_memory(device, &memory); rc != kNvmlSuccess) {
      return fail(
          absl::StrCat("GPU ", i, ": nvmlDeviceGetMemoryInfo: ", describe(rc)));
    }
    name[sizeof(name) - 1] = '\0';
    uuid[sizeof(uuid) - 1] = '\0';
    GpuDevice gpu;
    gpu.index = static_cast<int>(i);
    gpu.name = name;
    gpu.model = GpuModelFromName(gpu.name);
    gpu.uuid = uuid;
    gpu.memory_bytes = static_cast<int64_t>(
        std::min<unsigned long long>(memory.total, INT64_MAX));
    gpu.memory_used_bytes = static_cast<int64_t>(
        std::min<unsigned long long>(memory.used, INT64_MAX));
    NvmlUtilization util{};
    if (get_util != nullptr && get_util(device, &util) == kNvmlSuccess) {
      gpu.utilization_percent = util.gpu;
    }
    unsigned int value = 0;
    if (get_temp != nullptr &&
        get_temp(device, kNvmlTemperatureGpu, &value) == kNvmlSuccess) {
      gpu.temperature_c = value;
    }
    if (get_power != nullptr && get_power(device, &value) == kNvmlSuccess) {
      gpu.power_watts = value / 1000.0;  // milliwatts
    }
    if (get_clock != nullptr &&
        get_clock(device, kNvmlClockSm, &value) == kNvmlSuccess) {
      gpu.sm_clock_mhz = value;
    }
    if (get_minor != nullptr && get_minor(device, &value) == kNvmlSuccess &&
        value <= INT_MAX) {
      gpu.minor = static_cast<int>(value);
    }
    unsigned long long ecc = 0;
    if (get_ecc != nullptr && get_ecc(device, kNvmlMemoryErrorUncorrected,
                                      kNvmlVolatileEcc, &ecc) == kNvmlSuccess) {
      gpu.ecc_uncorrected =
          static_cast<int64_t>(std::min<unsigned long long>(ecc, INT64_MAX));
    }
    gpus.push_back(std::move(gpu));
  }
  // The driver's versions, for the node's labels and stack (optional: old
  // libraries lack them).
  software_ = GpuSoftware{};
  using DriverVersionFn = NvmlReturn (*)(char*, unsigned int);
  using CudaVersionFn = NvmlReturn (*)(int*);
  auto get_driver =
      Symbol<DriverVersionFn>(lib.get(), "nvmlSystemGetDriverVersion");
  auto get_cuda =
      Symbol<CudaVersionFn>(lib.get(), "nvmlSystemGetCudaDriverVersion_v2");
  if (get_cuda == nullptr) {
    get_cuda =
        Symbol<CudaVersionFn>(lib.get(), "nvmlSystemGetCudaDriverVersion");
  }
  char version[96] = {};
  if (get_driver != nullptr &&
      get_driver(version, sizeof(version)) == kNvmlSuccess) {
    version[sizeof(version) - 1] = '\0';
    software_.driver = version;
  }
  int cuda = 0;
  if (get_cuda != nullptr && get_cuda(&cuda) == kNvmlSuccess && cuda > 0) {
    software_.cuda = CudaVersionText(cuda);
  }
  shutdown();
  loaded_ = LoadedPathOf(lib.get());
  return gpus;
}

// --- Xid events ------------------------------------------------------------

namespace {

using NvmlEventSet = struct NvmlEventSetOpaque*;
struct NvmlEventData {  // nvmlEventData_t
  NvmlDevice device;
  unsigned long long event_type;
  unsigned long long event_data;  // the Xid
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
constexpr unsigned long long kNvmlEventTypeXidCriticalError = 0x8;
constexpr NvmlReturn kNvmlErrorTimeout = 10;
using NvmlEventSetCreateFn = NvmlReturn (*)(NvmlEventSet*);
using NvmlRegisterEventsFn = NvmlReturn (*)(NvmlDevice, unsigned long long,
                                            NvmlEventSet);
using NvmlEventSetWaitFn = NvmlReturn (*)(NvmlEventSet, NvmlEventData*,
                                          unsigned int);
using NvmlEventSetFreeFn = NvmlReturn (*)(NvmlEventSet);

}  // namespace

struct NvmlXidWatcher::State {
  void* lib = nullptr;
  NvmlShutdownFn shutdown = nullptr;
  NvmlEventSetWaitFn wait = nullptr;
  NvmlEventSetFreeFn free_set = nullptr;
  NvmlEventSet set = nullptr;
  std::vector<NvmlDevice> devices;  // by index
  std::atomic<bool> stop{false};
  std::thread thread;
  mutable absl::Mutex mu;
  std::map<int, int64_t> last ABSL_GUARDED_BY(mu);
};

NvmlXidWatcher::NvmlXidWatcher(std::string library)
    : library_(std::move(library)) {}

NvmlXidWatcher::~NvmlXidWatcher() { Stop(); }

absl::Status NvmlXidWatcher::Start() {
  if (state_ != nullptr) return absl::OkStatus();
  auto s = std::make_unique<State>();
  s->lib = dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (s->lib == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("Xid events: cannot load ", library_));
  }
  auto unload = [&](std::string why) {
    dlclose(s->lib);
    return absl::UnavailableError(absl::StrCat("Xid events: ", why));
  };
  auto init = Symbol<NvmlInitFn>(s->lib, "nvmlInit_v2");
  s->shutdown = Symbol<NvmlShutdownFn>(s->lib, "nvmlShutdown");
  auto get_count = Symbol<NvmlGetCountFn>(s->lib, "nvmlDeviceGetCount_v2");
  auto get_handle =
      Symbol<NvmlGetHandleFn>(s->lib, "nvmlDeviceGetHandleByIndex_v2");
  auto create = Symbol<NvmlEventSetCreateFn>(s->lib, "nvmlEventSetCreate");
  auto reg = Symbol<NvmlRegisterEventsFn>(s->lib, "nvmlDeviceRegisterEvents");
  s->wait = Symbol<NvmlEventSetWaitFn>(s->lib, "nvmlEventSetWait_v2");
  s->free_set = Symbol<NvmlEventSetFreeFn>(s->lib, "nvmlEventSetFree");
  if (init == nullptr || s->shutdown == nullptr || get_count == nullptr ||
      get_handle == nullptr || create == nullptr || reg == nullptr ||
      s->wait == nullptr || s->free_set == nullptr) {
    return unload("the NVML library has no event API");
  }
  if (init() != kNvmlSuccess) return unload("nvmlInit_v2 failed");
  unsigned int count = 0;
  if (get_count(&count) != kNvmlSuccess || create(&s->set) != kNvmlSuccess) {
    s->shutdown();
    return unload("cannot create an event set");
  }
  for (unsigned int i = 0; i < count; ++i) {
    NvmlDevice device = nullptr;
    if (get_handle(i, &device) != kNvmlSuccess) device = nullptr;
    s->devices.push_back(device);
    // GPUs that do not support the event are skipped (NOT_SUPPORTED).
    if (device != nullptr)
      (void)reg(device, kNvmlEventTypeXidCriticalError, s->set);
  }
  State* raw = s.get();
  s->thread = std::thread([raw] {
    while (!raw->stop.load()) {
      NvmlEventData data{};
      const NvmlReturn rc = raw->wait(raw->set, &data, 500);
      if (rc == kNvmlErrorTimeout) continue;
      if (rc != kNvmlSuccess) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        continue;
      }
      if ((data.event_type & kNvmlEventTypeXidCriticalError) == 0) continue;
      for (size_t i = 0; i < raw->devices.size(); ++i) {
        if (raw->devices[i] != data.device) continue;
        absl::MutexLock lock(&raw->mu);
        raw->last[static_cast<int>(i)] = static_cast<int64_t>(
            std::min<unsigned long long>(data.event_data, INT64_MAX));
      }
    }
  });
  state_ = std::move(s);
  return absl::OkStatus();
}

void NvmlXidWatcher::Stop() {
  if (state_ == nullptr) return;
  state_->stop.store(true);
  if (state_->thread.joinable()) state_->thread.join();
  state_->free_set(state_->set);
  state_->shutdown();
  dlclose(state_->lib);
  state_.reset();
}

std::map<int, int64_t> NvmlXidWatcher::LastXids() const {
  if (state_ == nullptr) return {};
  absl::MutexLock lock(&state_->mu);
  return state_->last;
}

bool IsHardwareXid(int64_t xid) {
  for (int64_t x : {48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120}) {
    if (xid == x) return true;
  }
  return false;
}

absl::StatusOr<GpuEmulation> ParseGpuEmulation(std::string_view text) {
  const std::string original(text);
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--emulate '", original, "': ", std::string(why),
        " (expected COUNTxMODEL[:MEMORY], e.g. 8xH200, 8xA100, 4xL4:24Gi)"));
  };
  std::string spec = Str(
      absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size())));
  std::string memory_text;
  if (size_t colon = spec.find(':'); colon != std::string::npos) {
    memory_text = spec.substr(colon + 1);
    spec.resize(colon);
  }
  const size_t x = spec.find_first_of("xX");
  if (x == std::string::npos || x == 0) return bad("no COUNTx");
  int count = 0;
  if (!absl::SimpleAtoi(spec.substr(0, x), &count) || count < 1 ||
      count > 1024) {
    return bad("COUNT must be a whole number from 1 to 1024");
  }
  GpuEmulation emulation;
  emulation.count = count;
  emulation.model = absl::AsciiStrToLower(spec.substr(x + 1));
  if (!ValidModelName(emulation.model)) {
    return bad("MODEL must be letters, digits, '-', '_' or '.'");
  }
  for (const KnownModel& known : kKnownModels) {
    if (emulation.model == known.model) {
      emulation.gpu_memory_bytes = known.gpu_memory_bytes;
      emulation.cpus = known.cpus;
      emulation.memory_bytes = known.memory_bytes;
    }
  }
  if (!memory_text.empty()) {
    absl::StatusOr<int64_t> bytes = ParseBytes(memory_text);
    if (!bytes.ok() || *bytes <= 0) {
      return bad(absl::StrCat("bad GPU memory '", memory_text, "'"));
    }
    emulation.gpu_memory_bytes = *bytes;
  }
  if (emulation.gpu_memory_bytes == 0) {
    return bad(absl::StrCat("the GPU memory of '", emulation.model,
                            "' is not known; give it as :MEMORY"));
  }
  return emulation;
}

EmulatedGpuProbe::EmulatedGpuProbe(GpuEmulation emulation,
                                   std::string node_name)
    : emulation_(std::move(emulation)), node_name_(std::move(node_name)) {}

absl::StatusOr<std::vector<GpuDevice>> EmulatedGpuProbe::Probe() {
  std::vector<GpuDevice> gpus;
  gpus.reserve(emulation_.count);
  for (int i = 0; i < emulation_.count; ++i) {
    const std::string key = absl::StrCat(node_name_, "/", i);
    const std::string uuid =
        EmulatedUuid("GPU", key, 0x6c6f6f6dULL, 0x67707573ULL);
    GpuDevice gpu;
    gpu.index = i;
    gpu.model = emulation_.model;
    gpu.name = absl::StrCat("emulated ", emulation_.model);
    gpu.uuid = uuid;
    gpu.minor = i;  // its stand-in is <node>/dev/nvidia<i>
    gpu.memory_bytes = emulation_.gpu_memory_bytes;
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

std::string CudaVersionText(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

std::string GpuModelFromName(std::string_view name) {
  std::vector<std::string> words;
  for (absl::string_view w :
       absl::StrSplit(absl::string_view(name.data(), name.size()), ' ',
                      absl::SkipWhitespace())) {
    words.push_back(absl::AsciiStrToLower(Str(w)));
  }
  size_t i = 0;
  while (i < words.size() && (words[i] == "nvidia" || words[i] == "tesla" ||
                              words[i] == "geforce" || words[i] == "quadro")) {
    ++i;
  }
  if (i >= words.size()) return "unknown";
  std::string model = words[i];
  if ((model == "rtx" || model == "titan") && i + 1 < words.size()) {
    model += words[i + 1];
  }
  if (size_t dash = model.find('-'); dash != std::string::npos && dash > 0) {
    model.resize(dash);
  }
  std::string clean;
  for (char c : model) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
        c == '.') {
      clean.push_back(c);
    }
  }
  return clean.empty() ? "unknown" : clean;
}

absl::StatusOr<HostInfo> ProbeHost(const std::string& meminfo_path) {
  HostInfo host;
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) {
    return absl::ErrnoToStatus(errno, "gethostname");
  }
  host.hostname = name;
  struct utsname uts {};
  if (uname(&uts) == 0) host.kernel = uts.release;
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus <= 0) return absl::ErrnoToStatus(errno, "sysconf(ONLN)");
  host.cpus = static_cast<int>(cpus);
  std::ifstream in(meminfo_path);
  if (!in) {
    return absl::InternalError(absl::StrCat("cannot read ", meminfo_path));
  }
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest(line);
    if (!absl::ConsumePrefix(&rest, "MemTotal:")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    int64_t kib = 0;
    if (!absl::ConsumeSuffix(&rest, "kB") ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kib) || kib <= 0) {
      return absl::InternalError(
          absl::StrCat(meminfo_path, ": cannot parse '", line, "'"));
    }
    host.memory_bytes = kib * 1024;
    return host;
  }
  return absl::InternalError(absl::StrCat(meminfo_path, " has no MemTotal"));
}

}  // namespace loom
