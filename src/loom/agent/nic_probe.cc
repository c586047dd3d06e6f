#include "loom/agent/nic_probe.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr char kNvidiaVendor[] = "0x10de";

// The file's text without surrounding white space; false when unreadable.
bool ReadTrimmed(const fs::path& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return false;
  *out = std::string(absl::StripAsciiWhitespace(text.str()));
  return true;
}

// At most 40 characters of `text`, for a note: printable ASCII, the rest
// '?' (the note goes into JSON, which must be UTF-8).
std::string Clip(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 40)) {
    out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  if (text.size() > 40) out += "...";
  return out;
}

// A name the kernel gives a NIC: letters, digits, '_', '-', '.'.
bool ValidNicName(std::string_view name) {
  return !name.empty() && name.size() <= 64 &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                  c == '_' || c == '-' || c == '.';
         });
}

// Names compared with runs of digits as numbers: mlx5_2 < mlx5_10.
bool NaturalLess(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (absl::ascii_isdigit(a[i]) && absl::ascii_isdigit(b[j])) {
      size_t ei = i, ej = j;
      while (ei < a.size() && absl::ascii_isdigit(a[ei])) ++ei;
      while (ej < b.size() && absl::ascii_isdigit(b[ej])) ++ej;
      std::string_view da = a.substr(i, ei - i);
      std::string_view db = b.substr(j, ej - j);
      while (da.size() > 1 && da[0] == '0') da.remove_prefix(1);
      while (db.size() > 1 && db[0] == '0') db.remove_prefix(1);
      if (da.size() != db.size()) return da.size() < db.size();
      if (da != db) return da < db;
      i = ei;
      j = ej;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

bool IsHex(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isxdigit(static_cast<unsigned char>(c));
  });
}

// "0000:1a:00.0": domain, bus, device, function.
bool IsPciAddress(absl::string_view s) {
  const std::vector<absl::string_view> parts = absl::StrSplit(s, ':');
  if (parts.size() != 3 || !IsHex(parts[0]) || parts[1].size() != 2 ||
      !IsHex(parts[1])) {
    return false;
  }
  const std::vector<absl::string_view> df = absl::StrSplit(parts[2], '.');
  return df.size() == 2 && df[0].size() == 2 && IsHex(df[0]) &&
         df[1].size() == 1 && IsHex(df[1]);
}

// "pci0000:17": a root bus.
bool IsPciRoot(absl::string_view s) {
  if (!absl::ConsumePrefix(&s, "pci")) return false;
  const std::vector<absl::string_view> parts = absl::StrSplit(s, ':');
  return parts.size() == 2 && IsHex(parts[0]) && IsHex(parts[1]);
}

// The PCIe path of a device's resolved sysfs directory
// (`.../devices/pci0000:17/0000:17:01.0/0000:18:00.0`): the root bus, then
// each address. Empty when it is not under a PCI root bus.
std::vector<std::string> PciPathOf(const fs::path& device) {
  std::vector<std::string> path;
  for (const fs::path& part : device) {
    const std::string name = part.string();
    if (path.empty()) {
      if (IsPciRoot(name)) path.push_back(name);
    } else if (IsPciAddress(name)) {
      path.push_back(name);
    } else {
      break;
    }
  }
  if (path.size() < 2) path.clear();  // a root bus alone is no device
  return path;
}

// The bridges two PCIe paths share: their common prefix past the root bus.
int SharedBridges(const std::vector<std::string>& a,
                  const std::vector<std::string>& b) {
  size_t common = 0;
  // Never the devices themselves (the last of each path).
  const size_t limit = std::min(a.size(), b.size());
  while (common < limit && common + 1 < a.size() && common + 1 < b.size() &&
         a[common] == b[common]) {
    ++common;
  }
  return common > 1 ? static_cast<int>(common) - 1 : 0;
}

// One NIC of `sys/class/infiniband`; what cannot be read is noted.
NicDevice ReadNic(const fs::path& root, const fs::path& dir) {
  NicDevice nic;
  nic.name = dir.filename().string();
  std::vector<std::string> notes;
  std::string text;
  if (!ReadTrimmed(dir / "ports/1/rate", &text)) {
    notes.push_back("ports/1/rate: cannot read");
  } else if (!ParseNicRate(text, &nic.rate_gbps)) {
    notes.push_back(
        absl::StrCat("ports/1/rate: not a rate: '", Clip(text), "'"));
  }
  if (!ReadTrimmed(dir / "ports/1/state", &text)) {
    notes.push_back("ports/1/state: cannot read");
  } else if (!ParseNicState(text, &nic.state)) {
    notes.push_back(
        absl::StrCat("ports/1/state: not a port state: '", Clip(text), "'"));
  }
  int numa = -1;
  if (!ReadTrimmed(dir / "device/numa_node", &text)) {
    notes.push_back("device/numa_node: cannot read");
  } else if (!absl::SimpleAtoi(text, &numa) || numa < -1) {
    notes.push_back(
        absl::StrCat("device/numa_node: not a NUMA node: '", Clip(text), "'"));
  } else {
    nic.numa_node = numa;
  }
  std::error_code ec;
  const fs::path device = fs::canonical(dir / "device", ec);
  if (ec) {
    notes.push_back(absl::StrCat("device: ", ec.message()));
  } else {
    nic.pci_path = PciPathOf(device);
    if (nic.pci_path.empty()) notes.push_back("device: not a PCIe device");
  }
  // Its verbs device: `device/infiniband_verbs/uverbsN`, else the one of
  // `sys/class/infiniband_verbs` whose ibdev names it.
  for (const auto& e :
       fs::directory_iterator(dir / "device/infiniband_verbs", ec)) {
    const std::string name = e.path().filename().string();
    if (absl::StartsWith(name, "uverbs")) nic.uverbs = name;
  }
  if (nic.uverbs.empty()) {
    for (const auto& e :
         fs::directory_iterator(root / "sys/class/infiniband_verbs", ec)) {
      if (ReadTrimmed(e.path() / "ibdev", &text) && text == nic.name) {
        nic.uverbs = e.path().filename().string();
      }
    }
  }
  nic.note = absl::StrJoin(notes, "; ");
  return nic;
}

// The NVIDIA display and 3D controllers of `sys/bus/pci/devices`, in bus
// order, numbered from 0.
std::vector<GpuPciPlace> ReadGpus(const fs::path& root) {
  std::vector<std::pair<std::string, GpuPciPlace>> found;
  std::error_code ec;
  for (const auto& e :
       fs::directory_iterator(root / "sys/bus/pci/devices", ec)) {
    std::string vendor, cls, numa;
    if (!ReadTrimmed(e.path() / "vendor", &vendor) ||
        absl::AsciiStrToLower(vendor) != kNvidiaVendor ||
        !ReadTrimmed(e.path() / "class", &cls)) {
      continue;
    }
    uint32_t code = 0;
    if (!absl::SimpleHexAtoi(cls, &code)) continue;
    if ((code >> 8) != 0x0300 && (code >> 8) != 0x0302) continue;
    GpuPciPlace gpu;
    std::error_code link;
    const fs::path device = fs::canonical(e.path(), link);
    if (!link) gpu.pci_path = PciPathOf(device);
    int n = -1;
    if (ReadTrimmed(e.path() / "numa_node", &numa) &&
        absl::SimpleAtoi(numa, &n) && n >= 0) {
      gpu.numa_node = n;
    }
    found.emplace_back(absl::AsciiStrToLower(e.path().filename().string()),
                       std::move(gpu));
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<GpuPciPlace> gpus;
  for (auto& [address, gpu] : found) {
    gpu.index = static_cast<int>(gpus.size());
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

std::string PciAddress(int domain, int bus, int device, int function) {
  return absl::StrFormat("%04x:%02x:%02x.%x", domain, bus, device, function);
}

}  // namespace

bool ParseNicRate(std::string_view whole, double* gbps) {
  const absl::string_view text =
      absl::StripAsciiWhitespace(absl::string_view(whole.data(), whole.size()));
  const size_t space = text.find(' ');
  if (space == absl::string_view::npos) return false;
  if (!absl::StartsWith(text.substr(space + 1), "Gb/sec")) return false;
  double value = 0;
  if (!absl::SimpleAtod(text.substr(0, space), &value) ||
      !std::isfinite(value) || value < 0) {
    return false;
  }
  *gbps = value;
  return true;
}

bool ParseNicState(std::string_view whole, std::string* state) {
  const absl::string_view text(whole.data(), whole.size());
  const size_t colon = text.find(':');
  if (colon == absl::string_view::npos) return false;
  int code = 0;
  if (!absl::SimpleAtoi(text.substr(0, colon), &code)) return false;
  const absl::string_view name =
      absl::StripAsciiWhitespace(text.substr(colon + 1));
  if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) {
        return absl::ascii_isupper(static_cast<unsigned char>(c)) || c == '_';
      })) {
    return false;
  }
  *state = std::string(name);
  return true;
}

void PairGpusWithNics(NicTopology& topology) {
  std::vector<NicDevice>& nics = topology.nics;
  for (NicDevice& nic : nics) nic.gpus.clear();
  for (const GpuPciPlace& gpu : topology.gpus) {
    int best = 0;
    std::vector<size_t> nearest;
    for (size_t i = 0; i < nics.size(); ++i) {
      if (nics[i].state != "ACTIVE") continue;
      const int shared = SharedBridges(gpu.pci_path, nics[i].pci_path);
      if (shared > best) {
        best = shared;
        nearest = {i};
      } else if (shared == best && shared > 0) {
        nearest.push_back(i);
      }
    }
    if (nearest.empty() && gpu.numa_node >= 0) {
      for (size_t i = 0; i < nics.size(); ++i) {
        if (nics[i].state == "ACTIVE" && nics[i].numa_node == gpu.numa_node) {
          nearest.push_back(i);
        }
      }
    }
    if (nearest.empty()) continue;
    size_t pick = nearest.front();
    for (size_t i : nearest) {
      if (nics[i].gpus.size() < nics[pick].gpus.size()) pick = i;
    }
    nics[pick].gpus.push_back(gpu.index);
  }
  for (NicDevice& nic : nics) std::sort(nic.gpus.begin(), nic.gpus.end());
}

NicTopology ReadSysfsTopology(const std::string& root) {
  const fs::path base(root.empty() ? "/" : root);
  NicTopology topology;
  std::error_code ec;
  for (const auto& e :
       fs::directory_iterator(base / "sys/class/infiniband", ec)) {
    if (!ValidNicName(e.path().filename().string())) continue;
    topology.nics.push_back(ReadNic(base, e.path()));
  }
  std::sort(topology.nics.begin(), topology.nics.end(),
            [](const NicDevice& a, const NicDevice& b) {
              return NaturalLess(a.name, b.name);
            });
  topology.gpus = ReadGpus(base);
  return topology;
}

SysfsNicProbe::SysfsNicProbe(std::string root) : root_(std::move(root)) {}

absl::StatusOr<std::vector<NicDevice>> SysfsNicProbe::Probe(
    const std::vector<GpuDevice>& gpus) {
  warning_.clear();
  NicTopology topology = ReadSysfsTopology(root_);
  if (topology.nics.empty()) return topology.nics;
  if (topology.gpus.size() != gpus.size()) {
    warning_ = absl::StrCat("sysfs lists ", topology.gpus.size(),
                            " NVIDIA GPUs and NVML ", gpus.size(),
                            ": no GPU is paired with a NIC");
    topology.gpus.clear();
  }
  for (size_t k = 0; k < topology.gpus.size(); ++k) {
    topology.gpus[k].index = gpus[k].index;
  }
  PairGpusWithNics(topology);
  return topology.nics;
}

NicTopology HgxTopology(int gpus, double rate_gbps) {
  NicTopology topology;
  for (int i = 0; i < gpus; ++i) {
    // Switch s: a root port on bus b of domain d, its upstream port on b+1,
    // four downstream ports on b+2 (two GPUs, two NICs), a bus each below.
    const int s = i / 2, j = i % 2;
    const int d = s / 4, b = 0x10 + 0x40 * (s % 4);
    const std::vector<std::string> trunk = {
        absl::StrFormat("pci%04x:%02x", d, b), PciAddress(d, b, 1, 0),
        PciAddress(d, b + 1, 0, 0)};
    // The first half of the switches on NUMA node 0, the rest on 1.
    const int switches = (gpus + 1) / 2;
    const int numa = s < (switches + 1) / 2 ? 0 : 1;
    GpuPciPlace gpu;
    gpu.index = i;
    gpu.pci_path = trunk;
    gpu.pci_path.push_back(PciAddress(d, b + 2, j, 0));
    gpu.pci_path.push_back(PciAddress(d, b + 3 + j, 0, 0));
    gpu.numa_node = numa;
    topology.gpus.push_back(std::move(gpu));
    NicDevice nic;
    nic.name = absl::StrCat("mlx5_", i);
    nic.rate_gbps = rate_gbps;
    nic.numa_node = numa;
    nic.state = "ACTIVE";
    nic.pci_path = trunk;
    nic.pci_path.push_back(PciAddress(d, b + 2, 2 + j, 0));
    nic.pci_path.push_back(PciAddress(d, b + 5 + j, 0, 0));
    nic.uverbs = absl::StrCat("uverbs", i);
    topology.nics.push_back(std::move(nic));
  }
  std::sort(topology.nics.begin(), topology.nics.end(),
            [](const NicDevice& a, const NicDevice& b) {
              return NaturalLess(a.name, b.name);
            });
  return topology;
}

EmulatedNicProbe::EmulatedNicProbe(const GpuEmulation& emulation)
    : model_(emulation.model) {}

absl::StatusOr<std::vector<NicDevice>> EmulatedNicProbe::Probe(
    const std::vector<GpuDevice>& gpus) {
  const double rate = model_ == "h200" || model_ == "h100" ? 400
                      : model_ == "a100"                   ? 200
                                                           : 0;
  if (rate == 0) return std::vector<NicDevice>();
  NicTopology topology = HgxTopology(static_cast<int>(gpus.size()), rate);
  for (size_t k = 0; k < gpus.size(); ++k) {
    topology.gpus[k].index = gpus[k].index;
  }
  PairGpusWithNics(topology);
  return topology.nics;
}

json NicsJson(const std::vector<NicDevice>& nics) {
  json out = json::array();
  for (const NicDevice& nic : nics) {
    json rate;
    if (nic.rate_gbps == std::floor(nic.rate_gbps) && nic.rate_gbps < 1e15) {
      rate = static_cast<int64_t>(nic.rate_gbps);
    } else {
      rate = nic.rate_gbps;
    }
    json o = {{"name", nic.name},
              {"rate_gbps", std::move(rate)},
              {"numa_node", nic.numa_node},
              {"state", nic.state},
              {"gpus", nic.gpus}};
    if (!nic.note.empty()) o["note"] = nic.note;
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace loom
