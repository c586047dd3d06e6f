#include "loom/agent/nic_step.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace loom {
namespace {

constexpr char kNcclIbHca[] = "NCCL_IB_HCA";

class NicStep : public LaunchStep {
 public:
  std::string_view name() const override { return "nics"; }

  absl::Status Prepare(LaunchContext& ctx, std::string*) const override {
    const AgentNode& node = ctx.node;
    std::vector<const NicDevice*> nics = NicsOfGpus(node, ctx.request.gpus);
    if (nics.empty() || ctx.request.env.contains(kNcclIbHca)) {
      nics.clear();
      for (const NicDevice& nic : node.nics) nics.push_back(&nic);
    }
    ctx.nic_devices.clear();
    for (const NicDevice* nic : nics) {
      if (!nic->uverbs.empty()) {
        ctx.nic_devices.push_back(absl::StrCat("infiniband/", nic->uverbs));
      }
    }
    if (!ctx.nic_devices.empty()) {
      ctx.nic_devices.push_back("infiniband/rdma_cm");
    }
    return absl::OkStatus();
  }

  void Apply(const LaunchContext& ctx, const TaskProcess&, int,
             TaskSpec& spec) const override {
    const std::vector<const NicDevice*> nics =
        NicsOfGpus(ctx.node, ctx.request.gpus);
    if (nics.empty()) return;
    spec.env.try_emplace(kNcclIbHca, NcclIbHca(nics));  // the job's wins
  }
};

}  // namespace

std::vector<const NicDevice*> NicsOfGpus(const AgentNode& node,
                                         const std::vector<int>& gpus) {
  std::vector<const NicDevice*> out;
  for (int g : gpus) {
    for (const NicDevice& nic : node.nics) {
      if (std::find(nic.gpus.begin(), nic.gpus.end(), g) == nic.gpus.end()) {
        continue;
      }
      if (std::find(out.begin(), out.end(), &nic) == out.end()) {
        out.push_back(&nic);
      }
      break;
    }
  }
  return out;
}

std::string NcclIbHca(const std::vector<const NicDevice*>& nics) {
  std::string value = "=";
  for (size_t i = 0; i < nics.size(); ++i) {
    absl::StrAppend(&value, i == 0 ? "" : ",", nics[i]->name);
  }
  return value;
}

std::unique_ptr<const LaunchStep> MakeNicStep() {
  return std::make_unique<NicStep>();
}

}  // namespace loom
