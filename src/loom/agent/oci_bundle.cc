#include "loom/agent/oci_bundle.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using json = nlohmann::json;

json Mount(const char* destination, const char* type, const char* source,
           std::vector<std::string> options) {
  return {{"destination", destination},
          {"type", type},
          {"source", source},
          {"options", std::move(options)}};
}

}  // namespace

std::string OciConfigJson(const OciConfig& c) {
  json process = {
      {"terminal", false},
      {"user",
       {{"uid", c.uid}, {"gid", c.gid}, {"additionalGids", c.additional_gids}}},
      {"args", c.args},
      {"env", c.env},
      {"cwd", c.cwd.empty() ? "/" : c.cwd},
      // No capability in any set, whoever the user: an image's root is not
      // the host's.
      {"capabilities",
       {{"bounding", json::array()},
        {"effective", json::array()},
        {"inheritable", json::array()},
        {"permitted", json::array()},
        {"ambient", json::array()}}},
      {"noNewPrivileges", true}};
  std::vector<std::string> shm = {"nosuid", "noexec", "nodev", "mode=1777"};
  if (c.shm_bytes > 0) shm.push_back(absl::StrCat("size=", c.shm_bytes));
  json mounts = json::array({
      Mount("/proc", "proc", "proc", {"nosuid", "noexec", "nodev"}),
      Mount("/dev", "tmpfs", "tmpfs",
            {"nosuid", "strictatime", "mode=755", "size=65536k"}),
      Mount("/dev/pts", "devpts", "devpts",
            {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}),
      Mount("/dev/shm", "tmpfs", "shm", shm),
      Mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}),
  });
  for (const OciBind& b : c.binds) {
    std::vector<std::string> options = {"rbind", "nosuid", "nodev"};
    options.push_back(b.readonly ? "ro" : "rw");
    json m = {{"destination", b.destination},
              {"type", "bind"},
              {"source", b.source},
              {"options", options}};
    mounts.push_back(std::move(m));
  }
  json devices = json::array();
  // Deny everything, then allow the defaults runc makes (null, zero, full,
  // random, urandom, tty, ptmx, pts) and the task's own devices.
  json allow = json::array({{{"allow", false}, {"access", "rwm"}}});
  for (const OciDevice& d : c.devices) {
    devices.push_back({{"path", d.path},
                       {"type", std::string(1, d.type)},
                       {"major", d.major},
                       {"minor", d.minor},
                       {"fileMode", d.file_mode},
                       {"uid", 0},
                       {"gid", 0}});
    allow.push_back({{"allow", true},
                     {"type", std::string(1, d.type)},
                     {"major", d.major},
                     {"minor", d.minor},
                     {"access", "rwm"}});
  }
  json resources = {{"devices", allow}};
  if (c.memory_limit_bytes > 0) {
    resources["memory"] = {{"limit", c.memory_limit_bytes}};
  }
  if (c.cpu_millis > 0) {
    constexpr int64_t kPeriod = 100000;  // us, the kernel's default
    resources["cpu"] = {{"period", kPeriod},
                        {"quota", c.cpu_millis * kPeriod / 1000}};
  }
  json linux_section = {
      {"namespaces", json::array({{{"type", "mount"}}})},
      {"devices", devices},
      {"resources", std::move(resources)},
      {"maskedPaths",
       {"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
        "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
        "/proc/sched_debug", "/sys/firmware", "/proc/scsi"}},
      {"readonlyPaths",
       {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
        "/proc/sysrq-trigger"}}};
  if (!c.cgroups_path.empty()) linux_section["cgroupsPath"] = c.cgroups_path;
  json config = {{"ociVersion", "1.0.2"},
                 {"process", std::move(process)},
                 {"root", {{"path", c.rootfs}, {"readonly", c.readonly_root}}},
                 {"mounts", std::move(mounts)},
                 {"linux", std::move(linux_section)}};
  return config.dump(2);
}

}  // namespace loom
