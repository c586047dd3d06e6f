#pragma once

// The OCI runtime configuration (`config.json` of a bundle, runtime-spec
// 1.0) of a container task, as runc reads it (docs/images.md, "Running").
// Pure: it writes JSON from what the image step decided; nothing here
// touches the host.
//
// What every container task gets: a mount namespace of its own and nothing
// else of its own (the host's network, which NCCL and gloo need, and its
// PIDs, IPC and hostname, as Slurm's pyxis/enroot does); no capabilities
// and no new privileges (setuid files in an image do not make root); a
// read-only root unless asked otherwise; /proc, a /dev of its own with the
// default devices and its GPUs, /dev/pts, /dev/shm, a read-only /sys; the
// host's /etc/hosts and /etc/resolv.conf when given.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

struct OciBind {
  std::string source;       // host path
  std::string destination;  // path in the container
  bool readonly = false;
};

// A device node made in the container's /dev (and allowed by its devices
// cgroup): a real GPU's /dev/nvidiaN, nvidiactl, /dev/infiniband/uverbsN.
struct OciDevice {
  std::string path;  // in the container
  char type = 'c';   // 'c' or 'b'
  int64_t major = 0;
  int64_t minor = 0;
  uint32_t file_mode = 0666;
};

struct OciConfig {
  std::vector<std::string> args;  // args[0] found on the container's PATH
  std::vector<std::string> env;   // "NAME=value"
  std::string cwd = "/";
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> additional_gids;
  std::string rootfs;  // absolute
  bool readonly_root = true;
  int64_t shm_bytes = 0;       // /dev/shm's size; 0: tmpfs's default
  std::vector<OciBind> binds;  // in order, after the standard mounts
  std::vector<OciDevice> devices;
  // The container's cgroup in every hierarchy (runc makes it): a child of
  // the task's v2 group, so that killing the group kills the container.
  std::string cgroups_path;
  // Limits runc sets on that cgroup (the task's, from its request).
  int64_t memory_limit_bytes = 0;  // 0: none
  int64_t cpu_millis = 0;          // 0: none; 1500: one and a half CPUs
};

// `config` as the JSON text of a bundle's config.json.
std::string OciConfigJson(const OciConfig& config);

}  // namespace loom
