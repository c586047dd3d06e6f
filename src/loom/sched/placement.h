#pragma once

#include <optional>
#include <vector>

#include "loom/core/job.h"
#include "loom/sched/cluster_state.h"
#include "loom/sched/node_mask.h"
#include "loom/sched/pending_reason.h"

namespace loom {

// Gang placement on the current free resources. Design assumptions:
// - All tasks of a job use one GPU model; a task never spans nodes.
// - A job whose GPUs fit in one node (tasks x GPUs per task <= the node's
//   GPUs) always runs on one node (NVLink), chosen best-fit: the partly used
//   node with the fewest free GPUs that fits, and only then an idle node, taken
//   from the leaf switch with the fewest idle nodes so that whole nodes and
//   whole leaves stay free for large gangs.
// - A larger gang goes under the lowest switch level that can hold it; among
//   the switches of that level the one with the least room that fits (best
//   fit); below it on the fewest leaf switches (leaves with the most room
//   first, the last one best-fit), and on the fewest nodes.
// - With model `any`, faster models are tried first (they finish work
//   sooner).
// Pure: reads `state`, never modifies it. Cost is independent of the queue
// length and, for most requests, of the cluster size (index lookups).
//
// Image locality: nodes in `prefer` (may be null; the nodes that hold the
// job's image) win ties, never anything else. A one-node job takes a node of
// `prefer` only among the nodes the rules above rank equal: the partly used
// nodes with the same (fewest) free GPUs, or the idle nodes of the chosen
// leaf. A gang's model, switch level, switch and leaves are chosen as without
// `prefer`; within each leaf, among nodes of equal room, nodes of `prefer`
// come first. So whether a placement is found, its fit and its topology never
// depend on `prefer`; only which of equally good nodes it uses does.
// `Placement::preferred_tasks` counts the tasks that landed on `prefer`.
// With a null `prefer` the placement is the same as without locality.
//
// Returns the placement, or nullopt with `*why` (if given) saying what is
// missing. Nodes in `avoid` (may be null) are not used.
std::optional<Placement> FindPlacement(const ClusterState& state,
                                       const JobShape& shape,
                                       const NodeMask* avoid,
                                       const NodeMask* prefer,
                                       PendingReason* why);

// Whether the gang could ever run on this cluster if it were empty and every
// node up: the "could it ever run" question (for tasks on parts of GPUs,
// `CouldSliceEverRun`). Returns false with a reason in
// `why` ("needs 300 nodes of h200; the cluster has 18").
bool CouldEverRun(const Cluster& cluster, const JobShape& shape,
                  std::string* why);

// Fills the topology fields of a placement whose `tasks` are set: the lowest
// common switch (`switch_level`, `switch_index`), the distinct nodes and
// leaves. The same figures `FindPlacement` reports, for a placement made
// elsewhere (a restored job, a recovery on hot spares).
void DescribePlacement(const Topology& topo, Placement* placement);

// GPU models to try for `shape`, fastest first.
std::vector<GpuModelId> CandidateModels(const Cluster& cluster,
                                        const JobShape& shape);

}  // namespace loom
