#pragma once

// Placement of tasks on parts of GPUs (docs/scheduling.md "GPU
// partitions"): MIG instances and time-shared GPUs. Design assumptions:
// - A job's tasks each take part of one GPU, all of one GPU model, each on
//   a GPU of its own.
// - Best fit first. A MIG task takes a free instance of its profile where
//   one exists (the GPU with the fewest free instances left, so that empty
//   GPUs stay empty). Only without one does the layout change, and then only
//   on a GPU with nothing running: an idle MIG GPU of a `dynamic` pool is
//   partitioned anew, or else a free whole GPU of such a pool becomes MIG
//   (on the node with the fewest free whole GPUs, keeping idle nodes whole
//   for gangs). A share takes the shared GPU with the least memory left that
//   fits, or else turns a free whole GPU of a pool that allows sharing into
//   a shared one (again on the fullest node).
// - The whole-GPU placement (placement.h) never sees MIG or shared GPUs:
//   they are not free as whole GPUs.
// - The `fgd` score (`SliceScore::kFgd`) places a share instead on the GPU
//   (a shared one with room, or a free whole one of a pool that shares)
//   where the expected fragmentation of a target workload grows least
//   (frag_score.h, after FGD, ATC'23); ties go by best fit. MIG tasks and
//   whole GPUs are placed as above under either score.
// Pure: reads `state`, never modifies it.

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "loom/core/job.h"
#include "loom/sched/cluster_state.h"
#include "loom/sched/frag_score.h"
#include "loom/sched/node_mask.h"
#include "loom/sched/pending_reason.h"

namespace loom {

// How shares are placed: `kBestFit` (the default) or `kFgd`.
enum class SliceScore { kBestFit, kFgd };

// Parses `best_fit` or `fgd`; InvalidArgument naming the text otherwise.
absl::StatusOr<SliceScore> ParseSliceScore(std::string_view name);
std::string_view SliceScoreName(SliceScore score);

// The score and, for `kFgd`, the target workload (not owned; must outlive
// the call). `kFgd` with no workload or an empty one places by best fit.
struct SliceScoring {
  SliceScore score = SliceScore::kBestFit;
  const TargetWorkload* workload = nullptr;
};

// Where the slice tasks of `shape` (`shape.slice.partial()`) fit now, or
// nullopt with `*why` (if given) saying what is missing. Nodes in `avoid`
// (may be null) are not used. A MIG task whose GPU gets a new layout has
// `TaskPlacement::repartition` set. Whether a placement
// exists does not depend on `scoring`, only where it is.
std::optional<Placement> FindSlicePlacement(const ClusterState& state,
                                            const JobShape& shape,
                                            const NodeMask* avoid,
                                            PendingReason* why,
                                            const SliceScoring& scoring = {});

// Whether the slice job could ever run on this cluster, every node up and
// empty: a node of a usable model whose pool has the MIG profile (declared
// in its layout, or `dynamic`) or allows sharing with enough GPU memory,
// and the CPU and memory for a task; and as many such GPUs as tasks.
// Returns false with a reason in `why`.
bool CouldSliceEverRun(const Cluster& cluster, const JobShape& shape,
                       std::string* why);

}  // namespace loom
