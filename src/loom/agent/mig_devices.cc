#include "loom/agent/mig_devices.h"

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace loom {
namespace {

// "nvidia-caps/nvidia-cap<N>" from an `access` file, or "" without a
// "DeviceFileMinor: N" line.
std::string CapDevice(const std::string& access) {
  std::ifstream in(access);
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view v = line;
    if (!absl::ConsumePrefix(&v, "DeviceFileMinor:")) continue;
    int minor = -1;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(v), &minor) && minor >= 0) {
      return absl::StrCat("nvidia-caps/nvidia-cap", minor);
    }
  }
  return "";
}

}  // namespace

std::vector<std::string> MigCapabilityDevices(const std::string& proc_root,
                                              int gpu_minor, int gi) {
  std::vector<std::string> out;
  if (gpu_minor < 0 || gi < 0) return out;
  const std::string root = absl::StrCat(
      proc_root, proc_root.empty() || proc_root.back() != '/' ? "/" : "",
      "proc/driver/nvidia/capabilities/gpu", gpu_minor, "/mig/gi", gi);
  const std::string own = CapDevice(absl::StrCat(root, "/access"));
  if (own.empty()) return out;
  out.push_back(own);
  std::vector<std::pair<int, std::string>> cis;
  if (DIR* dir = ::opendir(root.c_str()); dir != nullptr) {
    while (dirent* e = ::readdir(dir)) {
      absl::string_view name = e->d_name;
      int ci = -1;
      if (!absl::ConsumePrefix(&name, "ci") || !absl::SimpleAtoi(name, &ci)) {
        continue;
      }
      std::string device =
          CapDevice(absl::StrCat(root, "/", e->d_name, "/access"));
      if (!device.empty()) cis.emplace_back(ci, std::move(device));
    }
    ::closedir(dir);
  }
  std::sort(cis.begin(), cis.end());
  for (auto& [ci, device] : cis) out.push_back(std::move(device));
  return out;
}

}  // namespace loom
