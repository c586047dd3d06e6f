#pragma once

// The launch step of a task with datasets (docs/datasets.md): before its
// processes start, each dataset version of the launch is made present in
// the node's cache (`DatasetCache::Ensure`: from a peer that has it, else
// the cold store; verified), with its progress reported as the task's
// `pulling` phase "dataset"; then each process sees the cached copy
// read-only at the dataset's `mount`: a read-only bind mount in a mount
// namespace of the task's own (host processes; needs an agent running as
// root), or a read-only bind in the container's bundle (image_step.h reads
// `LaunchContext::data_binds`). The task holds its versions until it is
// forgotten, so the cache never evicts what a task reads.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/agent/dataset_cache.h"
#include "loom/agent/launch_steps.h"
#include "nlohmann/json.hpp"

namespace loom {

// Parses the `data` list of a launch body: [{source, mount, version, files,
// bytes, peers: [{node, address, token}]}]. `InvalidArgument` naming the
// field ("data[0].version: ...").
absl::StatusOr<std::vector<DatasetWant>> ParseDataLaunch(
    const nlohmann::json& data, std::string* field);

std::unique_ptr<const LaunchStep> MakeDataStep();

}  // namespace loom
