#pragma once

// What datasets may do on a cluster (the cluster spec's `datasets:`,
// docs/datasets.md "Local sources and mount points"): which local
// directories jobs may read as datasets, and where tasks may see them.
// Plain data and pure checks; the agent and the server enforce them
// (docs/security.md, "What runs as root on a node, and on which paths").

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "loom/core/dataset_spec.h"

namespace loom {

// Where datasets are mounted unless the cluster spec says otherwise.
inline std::vector<std::string> DefaultDatasetMountRoots() {
  return {"/data", "/datasets", "/mnt"};
}

struct DatasetPolicy {
  // Directories (absolute, normalised) under which a source that is a
  // local path may lie, each with everything under it. Empty: no local
  // sources (remotes of the operator's rclone config only).
  std::vector<std::string> local_roots;
  // Directories under which a dataset may be mounted in a task. Never a
  // system directory (`IsSystemDirectory`).
  std::vector<std::string> mount_roots = DefaultDatasetMountRoots();

  bool operator==(const DatasetPolicy&) const = default;
};

// True for "/" and for a normalised absolute path at or under a directory
// of the host's system (/bin, /boot, /dev, /etc, /lib*, /proc, /root, /run,
// /sbin, /sys, /usr, /var): nothing of a user's is mounted there, by any
// policy.
bool IsSystemDirectory(std::string_view path);

// Checks a job's datasets (sources set, mounts normalised) against the
// policy: a local source must lie under a `local_roots` directory, a mount
// under a `mount_roots` one and never on a system directory.
// InvalidArgument naming the field ("data[1].mount: ...").
absl::Status CheckJobDatasets(const DatasetPolicy& policy,
                              const std::vector<DatasetSpec>& data);

}  // namespace loom
