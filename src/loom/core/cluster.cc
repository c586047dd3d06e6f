#include "loom/core/cluster.h"

#include <algorithm>
#include <optional>

namespace loom {

int Cluster::TotalGpus() const {
  int total = 0;
  for (const NodeSpec& n : nodes) total += n.gpus;
  return total;
}

int Cluster::TotalGpus(GpuModelId model) const {
  int total = 0;
  for (const NodeSpec& n : nodes) {
    if (n.gpu_model == model) total += n.gpus;
  }
  return total;
}

GpuModelId Cluster::FindGpuModel(std::string_view name) const {
  for (size_t i = 0; i < gpu_models.size(); ++i) {
    if (gpu_models[i].name == name) return static_cast<GpuModelId>(i);
  }
  return -1;
}

const PriorityClass* Cluster::FindPriorityClass(std::string_view name) const {
  for (const PriorityClass& p : priority_classes) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const ProjectSpec* Cluster::FindProject(std::string_view name) const {
  for (const ProjectSpec& p : projects) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::vector<std::string> Cluster::AllowedPriorityClasses(
    std::string_view project) const {
  if (const ProjectSpec* p = FindProject(project);
      p != nullptr && !p->priority_classes.empty()) {
    std::vector<std::string> out;
    for (const PriorityClass& pc : priority_classes) {
      if (std::find(p->priority_classes.begin(), p->priority_classes.end(),
                    pc.name) != p->priority_classes.end()) {
        out.push_back(pc.name);
      }
    }
    return out;
  }
  std::optional<int> ceiling;
  if (const PriorityClass* normal = FindPriorityClass("normal")) {
    ceiling = normal->value;
  } else {
    for (const PriorityClass& pc : priority_classes) {
      if (!ceiling || pc.value < *ceiling) ceiling = pc.value;
    }
  }
  std::vector<std::string> out;
  for (const PriorityClass& pc : priority_classes) {
    if (ceiling && pc.value <= *ceiling) out.push_back(pc.name);
  }
  return out;
}

std::vector<GpuModel> DefaultGpuModels() {
  return {
      {"h200", 1.0, int64_t{141} << 30},
      {"a100", 0.4, int64_t{80} << 30},
  };
}

std::vector<PriorityClass> DefaultPriorityClasses() {
  return {{"low", 0}, {"normal", 100}, {"high", 1000}};
}

}  // namespace loom
