#include "loom/sched/pending_reason.h"

#include "absl/strings/str_cat.h"
#include "loom/common/units.h"

namespace loom {
namespace {

std::string ModelName(const Cluster& cluster, GpuModelId model) {
  if (model == kAnyGpuModel || model < 0 ||
      model >= static_cast<int>(cluster.gpu_models.size())) {
    return "";
  }
  return absl::StrCat(cluster.gpu_models[model].name, " ");
}

}  // namespace

const char* PendingReasonCodeName(PendingReason::Code code) {
  using C = PendingReason::Code;
  switch (code) {
    case C::kNew:
      return "new";
    case C::kNoFreeGpus:
      return "no_free_gpus";
    case C::kNoNodeFits:
      return "no_node_fits";
    case C::kNoSwitchFits:
      return "no_switch_fits";
    case C::kNoSchedulableNodes:
      return "no_schedulable_nodes";
    case C::kBehindHead:
      return "behind_head";
    case C::kReserved:
      return "reserved";
    case C::kWouldDelayReservation:
      return "would_delay_reservation";
    case C::kWaitingForPreemption:
      return "waiting_for_preemption";
    case C::kHigherQueuesFirst:
      return "higher_queues_first";
    case C::kInfeasible:
      return "infeasible";
    case C::kNoNodeMatchesSelector:
      return "no_node_matches_selector";
    case C::kNoMatchingNodeFits:
      return "no_matching_node_fits";
    case C::kRecoveringOnSpares:
      return "recovering_on_spares";
    case C::kNoSliceFits:
      return "no_gpu_slice_fits";
  }
  return "unknown";
}

namespace {

std::string FormatCode(const PendingReason& r, const Cluster& cluster,
                       absl::Time now, const std::string& selector,
                       const GpuSlice* slice) {
  using C = PendingReason::Code;
  const std::string model = ModelName(cluster, r.gpu_model);
  switch (r.code) {
    case C::kNew:
      return "queued; not yet considered by a scheduling pass";
    case C::kNoFreeGpus:
      return absl::StrCat("no free ", model, "GPUs in the cluster");
    case C::kNoNodeFits:
      return absl::StrCat("waiting for a node with ", r.need, " free ", model,
                          "GPUs; the most free on any node is ", r.have);
    case C::kNoSwitchFits:
      if (r.whole_nodes) {
        return absl::StrCat("waiting for ", r.need, " free ", model,
                            "nodes under one switch; ", r.have, " free");
      }
      return absl::StrCat("waiting for room for ", r.need, " tasks of ",
                          r.gpus_per_task, " ", model,
                          "GPUs under one switch; room for ", r.have);
    case C::kNoSchedulableNodes:
      return absl::StrCat("no schedulable ", model,
                          "nodes (all down, drained or cordoned)");
    case C::kBehindHead:
      return absl::StrCat("queued behind job ", r.other,
                          " (fifo: strict arrival order)");
    case C::kReserved:
      if (r.when == absl::InfiniteFuture()) {
        return absl::StrCat(
            "next to run: ", r.need, " ", model,
            "GPUs reserved as they free up; start time unknown (the jobs "
            "holding them have no time limit)");
      }
      return absl::StrCat(
          "next to run: ", r.need, " ", model,
          "GPUs reserved; expected start in ",
          FormatDurationShort(std::max(absl::ZeroDuration(), r.when - now)));
    case C::kWouldDelayReservation:
      return absl::StrCat("would delay job ", r.other,
                          ", which holds the reservation; no room outside "
                          "its reserved nodes");
    case C::kWaitingForPreemption:
      return absl::StrCat("waiting for ", r.other,
                          " preempted job(s) to release their GPUs");
    case C::kHigherQueuesFirst:
      return absl::StrCat("in LAS queue ", r.level,
                          "; jobs of higher queues take the free GPUs first");
    case C::kInfeasible:
      return "cannot run on the cluster as it is now";
    case C::kNoNodeMatchesSelector:
      return absl::StrCat("no node matches node_selector ", selector, " (0 of ",
                          cluster.nodes.size(), " nodes)");
    case C::kNoMatchingNodeFits:
      return absl::StrCat(
          "waiting for ", r.need, " free ", model, r.need == 1 ? "GPU" : "GPUs",
          " on nodes matching ", selector, "; ", r.have, " of ",
          cluster.nodes.size(), " nodes match",
          r.usable < r.have ? absl::StrCat(", ", r.usable, " schedulable")
                            : std::string());
    case C::kNoSliceFits:
      if (slice != nullptr && !slice->mig.empty()) {
        return absl::StrCat(
            "waiting for ", r.need == 1 ? "a " : absl::StrCat(r.need, " "),
            slice->mig, " MIG instance", r.need == 1 ? "" : "s", " on ",
            r.need == 1 ? "a GPU" : "GPUs of their own", "; ", r.have,
            " free, and no idle GPU of a pool with mig.dynamic to partition");
      }
      return absl::StrCat(
          "waiting for ",
          slice != nullptr ? FormatBytes(slice->share_bytes)
                           : std::string("part"),
          " of a shared ", model, "GPU",
          r.need == 1 ? "" : absl::StrCat(" for each of ", r.need, " tasks"),
          "; the most left on one is ", FormatBytes(r.bytes),
          ", and no free whole GPU of a pool that allows sharing");
    case C::kRecoveringOnSpares:
      if (r.other == 0) {
        return "lost a node; restarting on its hot spares in the next "
               "scheduling pass";
      }
      return absl::StrCat("lost a node; restarting on its hot spares once ",
                          r.other,
                          " preempted job(s) there have stopped (killed "
                          "without grace)");
  }
  return "pending";
}

}  // namespace

std::string FormatPendingReason(const PendingReason& r, const Cluster& cluster,
                                absl::Time now, const std::string& selector,
                                const GpuSlice* slice) {
  std::string text = FormatCode(r, cluster, now, selector, slice);
  if (r.spare_nodes > 0) {
    absl::StrAppend(
        &text, "; ", r.spare_nodes,
        r.spare_nodes_idle ? " free" : " partly free",
        r.spare_nodes == 1 ? " node is a hot spare" : " nodes are hot spares",
        " of ",
        r.spare_owners <= 1 ? absl::StrCat("job ", r.spare_owner)
                            : absl::StrCat(r.spare_owners, " jobs (job ",
                                           r.spare_owner, " and others)"),
        ", lent to preemptible jobs only");
  }
  return text;
}

}  // namespace loom
