#include "loom/agent/gpu_driver_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string_view>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "loom/agent/cdi_spec.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

constexpr char kNvidiaGpuKind[] = "nvidia.com/gpu";

// The control devices a CUDA program opens besides its GPUs'.
constexpr const char* kGpuControlDevices[] = {
    "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"};

// What nvidia-container-cli (libnvidia-container, src/nvc_info.c) injects
// for its "utility", "compute" and "video" capabilities.
constexpr const char* kDriverLibraryNames[] = {
    // utility
    "libnvidia-ml.so", "libnvidia-cfg.so", "libnvidia-nscq.so",
    // compute
    "libcuda.so", "libcudadebugger.so", "libnvidia-opencl.so",
    "libnvidia-gpucomp.so", "libnvidia-ptxjitcompiler.so",
    "libnvidia-fatbinaryloader.so", "libnvidia-allocator.so",
    "libnvidia-compiler.so", "libnvidia-pkcs11.so",
    "libnvidia-pkcs11-openssl3.so", "libnvidia-nvvm.so",
    "libnvidia-tileiras.so",
    // video
    "libnvcuvid.so", "libnvidia-encode.so", "libnvidia-opticalflow.so"};

// The library of `kDriverLibraryNames` that `name` is a file of
// ("libcuda.so", "libcuda.so.1", "libcuda.so.580.95.05"), and what follows
// its name ("", "1", "580.95.05"); null when it is none of them.
const char* DriverLibraryOf(std::string_view name, std::string_view* version) {
  for (const char* library : kDriverLibraryNames) {
    if (!name.starts_with(library)) continue;
    std::string_view rest = name.substr(std::string_view(library).size());
    if (!rest.empty()) {
      if (rest.size() < 2 || rest[0] != '.') continue;
      rest.remove_prefix(1);
      if (!std::all_of(rest.begin(), rest.end(), [](char c) {
            return (c >= '0' && c <= '9') || c == '.';
          })) {
        continue;
      }
    }
    if (version != nullptr) *version = rest;
    return library;
  }
  return nullptr;
}

bool DriverFileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Collects the edits, each container path once, the first one winning.
class DriverFilesBuilder {
 public:
  GpuDriverFiles& out() { return out_; }

  void Device(const std::string& host, const std::string& container) {
    if (devices_.insert(container).second) {
      out_.devices.push_back({host, container});
    }
  }
  bool Mount(const std::string& host, const std::string& container,
             bool readonly) {
    if (!mounts_.insert(container).second) return false;
    out_.mounts.push_back({host, container, readonly});
    return true;
  }
  void LibraryDir(const std::string& dir) { Once(out_.library_dirs, dir); }
  void BinaryDir(const std::string& dir) { Once(out_.binary_dirs, dir); }
  void Warn(std::string text) { out_.warnings.push_back(std::move(text)); }

 private:
  static void Once(std::vector<std::string>& list, const std::string& item) {
    if (std::find(list.begin(), list.end(), item) == list.end()) {
      list.push_back(item);
    }
  }

  GpuDriverFiles out_;
  std::set<std::string> devices_;
  std::set<std::string> mounts_;
};

// The device file of `gpu` under `device_dir`, as /dev/nvidia<minor> inside.
void AddGpuDeviceByMinor(const DriverGpu& gpu, const GpuDriverOptions& options,
                         DriverFilesBuilder& b) {
  int minor = gpu.minor;
  if (minor < 0) {
    b.Warn(absl::StrCat("GPU ", gpu.index, " (", gpu.uuid,
                        "): its minor number is not known; /dev/nvidia",
                        gpu.index, " is taken for it"));
    minor = gpu.index;
  }
  const std::string name = absl::StrCat("nvidia", minor);
  const std::string host = absl::StrCat(options.device_dir, "/", name);
  if (!DriverFileExists(host)) {
    b.Warn(absl::StrCat("GPU ", gpu.index, " (", gpu.uuid, "): ", host,
                        " is missing"));
    return;
  }
  b.Device(host, absl::StrCat("/dev/", name));
}

// The names, in the host directory of each library a spec mounts, of the
// links to it: the sonames ldconfig made (libcuda.so.1), and the links
// nvidia-ctk's create-symlinks hook would make when the host has them too
// (libcuda.so).
class HostLibraryLinks {
 public:
  std::vector<std::string> To(const std::string& host_file) {
    const fs::path file(host_file);
    const std::string base = file.filename().string();
    const size_t so = base.find(".so");
    if (so == std::string::npos) return {};
    const std::string stem = base.substr(0, so + 3);
    std::error_code ec;
    const fs::path real = fs::canonical(file, ec);
    if (ec || !fs::is_regular_file(real, ec)) return {};
    std::vector<std::string> links;
    for (const std::string& name : Names(file.parent_path().string())) {
      if (name == base || !absl::StartsWith(name, stem)) continue;
      const fs::path entry = file.parent_path() / name;
      if (!fs::is_symlink(fs::symlink_status(entry, ec))) continue;
      if (fs::canonical(entry, ec) == real && !ec) links.push_back(name);
    }
    return links;
  }

 private:
  // Each directory listed once, sorted.
  const std::vector<std::string>& Names(const std::string& dir) {
    auto [it, added] = names_.try_emplace(dir);
    if (added) {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(dir, ec)) {
        it->second.push_back(e.path().filename().string());
      }
      std::sort(it->second.begin(), it->second.end());
    }
    return it->second;
  }

  std::map<std::string, std::vector<std::string>> names_;
};

void AddCdiEdits(const CdiEdits& edits, const std::string& file,
                 HostLibraryLinks& links, DriverFilesBuilder& b) {
  GpuDriverFiles& out = b.out();
  out.env.insert(out.env.end(), edits.env.begin(), edits.env.end());
  out.hooks_not_run += edits.hooks;
  for (const CdiDeviceNode& node : edits.device_nodes) {
    if (!DriverFileExists(node.host_path)) {
      b.Warn(absl::StrCat("CDI spec ", file, ": device node ", node.host_path,
                          " is missing; skipped"));
      continue;
    }
    b.Device(node.host_path, node.path);
  }
  for (const CdiMount& m : edits.mounts) {
    if (!m.type.empty() && m.type != "bind") {
      b.Warn(absl::StrCat("CDI spec ", file, ": mount of ", m.container_path,
                          " is of type ", m.type,
                          ", and only bind mounts are made; skipped"));
      continue;
    }
    if (!DriverFileExists(m.host_path)) {
      b.Warn(absl::StrCat("CDI spec ", file, ": ", m.host_path,
                          " is missing; its mount is skipped"));
      continue;
    }
    b.Mount(m.host_path, m.container_path, m.readonly());
    const fs::path inside(m.container_path);
    if (inside.filename().string().find(".so") == std::string::npos) {
      continue;
    }
    const std::string dir = inside.parent_path().string();
    b.LibraryDir(dir);
    for (const std::string& name : links.To(m.host_path)) {
      b.Mount(m.host_path, absl::StrCat(dir, "/", name), m.readonly());
    }
  }
}

// The CDI edits for `gpus`; false when no spec names any of them.
bool AddFromCdi(const std::vector<DriverGpu>& gpus,
                const GpuDriverOptions& options, DriverFilesBuilder& b) {
  std::vector<std::string> warnings;
  const std::vector<CdiSpec> specs =
      ReadCdiSpecs(options.cdi_dirs, kNvidiaGpuKind, &warnings);
  for (std::string& w : warnings) b.Warn(std::move(w));
  if (specs.empty()) return false;
  // For each GPU, the spec and device that name it: by UUID, else by index;
  // among specs, the later one.
  auto find = [&](const std::string& name) -> std::pair<int, int> {
    for (int s = static_cast<int>(specs.size()) - 1; s >= 0; --s) {
      const auto& devices = specs[s].devices;
      for (size_t d = 0; d < devices.size(); ++d) {
        if (devices[d].name == name) return {s, static_cast<int>(d)};
      }
    }
    return {-1, -1};
  };
  std::vector<std::pair<int, int>> chosen;
  std::vector<const DriverGpu*> unnamed;
  for (const DriverGpu& gpu : gpus) {
    std::pair<int, int> at =
        gpu.uuid.empty() ? std::pair<int, int>{-1, -1} : find(gpu.uuid);
    if (at.first < 0) at = find(std::to_string(gpu.index));
    if (at.first < 0) {
      unnamed.push_back(&gpu);
    } else {
      chosen.push_back(at);
    }
  }
  std::vector<std::string> files;
  for (const CdiSpec& spec : specs) files.push_back(spec.file);
  if (chosen.empty()) {
    b.Warn(absl::StrCat("the CDI specs (", absl::StrJoin(files, ", "),
                        ") name none of the task's GPUs; not used"));
    return false;
  }
  HostLibraryLinks links;
  for (int s = 0; s < static_cast<int>(specs.size()); ++s) {
    bool used = false;
    for (const auto& [cs, cd] : chosen) used = used || cs == s;
    if (!used) continue;
    b.out().from.push_back(specs[s].file);
    AddCdiEdits(specs[s].edits, specs[s].file, links, b);
    for (const auto& [cs, cd] : chosen) {
      if (cs == s)
        AddCdiEdits(specs[s].devices[cd].edits, specs[s].file, links, b);
    }
  }
  for (const DriverGpu* gpu : unnamed) {
    b.Warn(absl::StrCat("GPU ", gpu->index, " (", gpu->uuid,
                        ") is in no CDI spec (", absl::StrJoin(files, ", "),
                        "); its device is taken from ", options.device_dir));
    AddGpuDeviceByMinor(*gpu, options, b);
  }
  return true;
}

// nvidia-smi on the agent's PATH, else /usr/bin's; "" when neither.
std::string FindNvidiaSmi(const GpuDriverOptions& options) {
  if (!options.nvidia_smi.empty()) return options.nvidia_smi;
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path != nullptr ? path : "", ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/nvidia-smi");
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return ::access("/usr/bin/nvidia-smi", X_OK) == 0 ? "/usr/bin/nvidia-smi"
                                                    : "";
}

// The driver's libraries in the NVML library's directory, and nvidia-smi.
void AddFromDriverDir(const GpuDriverOptions& options, DriverFilesBuilder& b) {
  std::error_code ec;
  const fs::path nvml = fs::canonical(options.nvml_library, ec);
  if (ec) {
    b.Warn(absl::StrCat("the NVML library ", options.nvml_library, ": ",
                        ec.message(), "; no driver files are given"));
    return;
  }
  const fs::path dir = nvml.parent_path();
  // libnvidia-ml.so.580.95.05: files of another driver version left in the
  // directory are not taken.
  std::string_view version;
  const std::string nvml_name = nvml.filename().string();
  DriverLibraryOf(nvml_name, &version);
  const std::string driver_version =
      version.find('.') != std::string_view::npos ? std::string(version) : "";
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  b.out().from.push_back(dir.string());
  for (const std::string& name : names) {
    if (DriverLibraryOf(name, nullptr) == nullptr) continue;
    const fs::path entry = dir / name;
    const fs::path real = fs::canonical(entry, ec);
    if (ec || !fs::is_regular_file(real, ec)) continue;
    if (real.parent_path() != dir) {
      b.Warn(absl::StrCat(entry.string(), " leads out of ", dir.string(),
                          " (to ", real.string(), "); not given"));
      continue;
    }
    const std::string real_name = real.filename().string();
    std::string_view real_version;
    DriverLibraryOf(real_name, &real_version);
    if (!driver_version.empty() &&
        real_version.find('.') != std::string_view::npos &&
        real_version != driver_version) {
      continue;
    }
    b.Mount(real.string(), absl::StrCat(kDriverLibraryDir, "/", name), true);
  }
  if (b.out().mounts.empty()) {
    b.Warn(absl::StrCat("no driver library found in ", dir.string()));
    return;
  }
  b.LibraryDir(kDriverLibraryDir);
  const std::string smi = FindNvidiaSmi(options);
  const fs::path smi_real = smi.empty() ? fs::path() : fs::canonical(smi, ec);
  if (smi.empty() || ec || !fs::is_regular_file(smi_real, ec)) {
    b.Warn("nvidia-smi not found (the agent's PATH, /usr/bin); not given");
    return;
  }
  b.Mount(smi_real.string(), absl::StrCat(kDriverBinaryDir, "/nvidia-smi"),
          true);
  b.BinaryDir(kDriverBinaryDir);
}

}  // namespace

GpuDriverFiles FindGpuDriverFiles(const std::vector<DriverGpu>& gpus,
                                  const GpuDriverOptions& options) {
  DriverFilesBuilder b;
  if (gpus.empty()) return std::move(b.out());
  if (AddFromCdi(gpus, options, b)) {
    b.out().source = GpuDriverFiles::Source::kCdi;
  } else {
    for (const DriverGpu& gpu : gpus) AddGpuDeviceByMinor(gpu, options, b);
    if (!options.nvml_library.empty()) {
      AddFromDriverDir(options, b);
      if (!b.out().mounts.empty()) {
        b.out().source = GpuDriverFiles::Source::kDriverDir;
      }
    }
  }
  // The control devices, where the node has them and a spec did not give
  // them already.
  for (const char* name : kGpuControlDevices) {
    const std::string host = absl::StrCat(options.device_dir, "/", name);
    if (DriverFileExists(host)) b.Device(host, absl::StrCat("/dev/", name));
  }
  return std::move(b.out());
}

std::string DescribeGpuDriverFiles(const GpuDriverFiles& files) {
  switch (files.source) {
    case GpuDriverFiles::Source::kCdi:
      return absl::StrCat(
          "CDI spec ", absl::StrJoin(files.from, ", "), ": ",
          files.devices.size(), " device nodes, ", files.mounts.size(),
          " mounts",
          files.hooks_not_run > 0
              ? absl::StrCat(" (", files.hooks_not_run, " hooks not run)")
              : "");
    case GpuDriverFiles::Source::kDriverDir:
      return absl::StrCat(
          files.mounts.size(), " files from ", absl::StrJoin(files.from, ", "),
          " (under ", kDriverLibraryDir,
          files.binary_dirs.empty()
              ? ""
              : absl::StrCat(", nvidia-smi under ", kDriverBinaryDir),
          "), ", files.devices.size(), " device nodes");
    case GpuDriverFiles::Source::kNone:
      break;
  }
  return absl::StrCat(
      "no driver files (no CDI spec names the GPUs, no NVML "
      "library); ",
      files.devices.size(), " device nodes");
}

}  // namespace loom
