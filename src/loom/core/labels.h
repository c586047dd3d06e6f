#pragma once

// Node labels, job node selectors and software stacks (docs/scheduling.md,
// "Labels and selectors"; docs/cluster-spec.md, "stack"). Pure functions of
// plain maps: the scheduler, the controller and the CLI share them.

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace loom {

// Label keys the agent reports and the server adds (docs/agent.md).
inline constexpr char kLabelGpuModel[] = "gpu.model";
inline constexpr char kLabelGpuDriver[] = "gpu.driver";
inline constexpr char kLabelGpuCuda[] = "gpu.cuda";
inline constexpr char kLabelKernel[] = "kernel";
inline constexpr char kLabelPool[] = "pool";
inline constexpr char kLabelLeaf[] = "leaf";
inline constexpr char kLabelSpine[] = "spine";

// The keys a pool's `stack` may declare and an agent reports: the GPU
// driver, the CUDA version the driver supports, and loom's own version.
inline constexpr std::string_view kStackKeys[] = {"driver", "cuda", "loom"};

// True for a label key: 1 to 128 letters, digits, '-', '_', '.', '/',
// starting with a letter or digit.
bool IsValidLabelKey(std::string_view key);

// Whether a node with `labels` satisfies `selector`: every key of the
// selector is a label of the node with the same value (exact string
// equality). An empty value in the selector asks only that the node have
// the key, with any value. An empty selector matches every node.
bool MatchesSelector(const std::map<std::string, std::string>& selector,
                     const std::map<std::string, std::string>& labels);

// The selector as people read it: "{gpu.driver: 550.54.15, nvme}" (a key
// with an empty value stands alone). "{}" when empty.
std::string FormatSelector(const std::map<std::string, std::string>& selector);

// One `loom run --constraint` value: "key=value", or "key" alone (the key
// with any value; the pair's value is then empty). InvalidArgument naming
// the text for an invalid key or an empty "key=".
absl::StatusOr<std::pair<std::string, std::string>> ParseConstraint(
    std::string_view text);

// How a node's reported software stack differs from its pool's declared
// one: one entry per declared key whose reported value is missing or not
// equal, in key order, e.g. "driver 550.90.07 (pool wants 550.54.15)" or
// "cuda not reported (pool wants 12.4)". Keys the pool does not declare are
// not compared. Empty: no drift.
std::vector<std::string> StackDrift(
    const std::map<std::string, std::string>& declared,
    const std::map<std::string, std::string>& reported);

}  // namespace loom
