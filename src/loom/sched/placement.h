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

// Data and image locality together. Each mask may be null. Where the rules
// above leave a choice between equally good nodes, a node's rank decides:
// nodes holding the job's datasets and its image first, then those holding
// the datasets, then those holding the image, then the rest. Datasets rank
// above the image because they are usually far larger (tens of GB to TB
// against a few GB) and a cache miss costs a fill from the cold store.
// Like `prefer` above, the ranks never change whether a placement is found,
// its fit or its topology.
struct NodePreference {
  const NodeMask* data = nullptr;   // nodes holding all the job's datasets
  const NodeMask* image = nullptr;  // nodes holding the job's image

  bool empty() const { return data == nullptr && image == nullptr; }
  int Rank(int node) const {
    return (data != nullptr && data->Contains(node) ? 2 : 0) +
           (image != nullptr && image->Contains(node) ? 1 : 0);
  }
  // The best rank a node can have.
  int Top() const { return (data != nullptr ? 2 : 0) + (image != nullptr); }
};

// As above, with both preferences: `preferred_tasks` counts the tasks on
// `prefer.image`, `data_tasks` those on `prefer.data`.
std::optional<Placement> FindPlacement(const ClusterState& state,
                                       const JobShape& shape,
                                       const NodeMask* avoid,
                                       const NodePreference& prefer,
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
