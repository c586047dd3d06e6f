#include "loom/server/task_slice.h"

#include <map>
#include <string>
#include <tuple>
#include <utility>

namespace loom {

TaskSlice SliceOf(const ClusterState& state, const TaskPlacement& t) {
  TaskSlice s;
  if (t.mig_profile < 0) {
    s.share_bytes = t.share_bytes;
    return s;
  }
  const std::vector<MigProfile>& profiles = state.MigProfilesOn(t.node);
  s.mig = profiles[t.mig_profile].name;
  s.mig_profile = t.mig_profile;
  s.mig_start = t.mig_start;
  for (const MigInstance& in : state.Part(t.node, t.slice_gpu).layout) {
    s.layout.emplace_back(profiles[in.profile].name, in.start);
  }
  return s;
}

nlohmann::json SliceJson(const TaskSlice& s) {
  if (s.mig.empty()) return {{"share_bytes", s.share_bytes}};
  nlohmann::json layout = nlohmann::json::array();
  for (const auto& [name, start] : s.layout) layout.push_back({name, start});
  return {{"mig", s.mig},
          {"profile", s.mig_profile},
          {"start", s.mig_start},
          {"layout", layout}};
}

absl::StatusOr<TaskSlice> ParseSlice(const nlohmann::json& j) {
  TaskSlice s;
  if (!j.is_object()) return absl::InvalidArgumentError("slice: not an object");
  if (auto b = j.find("share_bytes"); b != j.end()) {
    if (!b->is_number_integer() || b->get<int64_t>() <= 0) {
      return absl::InvalidArgumentError(
          "slice.share_bytes: not a positive integer");
    }
    s.share_bytes = b->get<int64_t>();
    return s;
  }
  auto m = j.find("mig");
  auto p = j.find("profile");
  auto st = j.find("start");
  auto l = j.find("layout");
  if (m == j.end() || !m->is_string() || p == j.end() ||
      !p->is_number_integer() || st == j.end() || !st->is_number_integer() ||
      l == j.end() || !l->is_array()) {
    return absl::InvalidArgumentError(
        "slice: needs share_bytes, or mig, profile, start and layout");
  }
  s.mig = m->get<std::string>();
  s.mig_profile = p->get<int>();
  s.mig_start = st->get<int>();
  if (s.mig_profile < 0 || s.mig_start < 0 || s.mig_start >= 8) {
    return absl::InvalidArgumentError("slice: profile or start out of range");
  }
  for (const nlohmann::json& e : *l) {
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() ||
        !e[1].is_number_integer()) {
      return absl::InvalidArgumentError(
          "slice.layout: entries are [profile, start]");
    }
    s.layout.emplace_back(e[0].get<std::string>(), e[1].get<int>());
  }
  return s;
}

TaskPlacement SlicePlacement(int node, int gpu, const TaskSlice& slice) {
  TaskPlacement t;
  t.node = node;
  t.slice_gpu = gpu;
  if (slice.mig.empty()) {
    t.share_bytes = slice.share_bytes;
  } else {
    t.mig_profile = slice.mig_profile;
    t.mig_start = slice.mig_start;
  }
  return t;
}

nlohmann::json GpuPartsJson(const ClusterState& state, int node) {
  nlohmann::json out = nlohmann::json::array();
  const uint32_t mask = state.PartMask(node);
  const std::vector<MigProfile>& profiles = state.MigProfilesOn(node);
  for (int g = 0; g < state.NodeGpus(node); ++g) {
    if (!((mask >> g) & 1)) continue;
    const GpuPart& part = state.Part(node, g);
    if (part.mode == GpuMode::kMig) {
      nlohmann::json instances = nlohmann::json::array();
      for (size_t i = 0; i < part.layout.size(); ++i) {
        const int p = part.layout[i].profile;
        instances.push_back(
            {{"profile", p >= 0 && p < static_cast<int>(profiles.size())
                             ? profiles[p].name
                             : std::string("?")},
             {"start", part.layout[i].start},
             {"job", part.owners[i]}});
      }
      out.push_back({{"gpu", g}, {"mode", "mig"}, {"instances", instances}});
    } else {
      out.push_back({{"gpu", g},
                     {"mode", "shared"},
                     {"capacity_bytes", part.capacity},
                     {"used_bytes", part.used},
                     {"tasks", part.tasks}});
    }
  }
  return out;
}

void WriteGpuPartMetrics(const ClusterState& state, const Cluster& cluster,
                         MetricsWriter& out) {
  out.Family("loom_gpu_slices",
             "MIG instances of partitioned GPUs by profile (GPU_I_PROFILE, "
             "NVIDIA's name as DCGM labels it) and state (used: a task "
             "holds it; free).",
             MetricType::kGauge);
  std::vector<std::tuple<int, int, int64_t, int64_t>> shared;
  state.PartNodes().ForEachUntil([&](int n) {
    const std::string& node = cluster.nodes[n].name;
    const std::vector<MigProfile>& profiles = state.MigProfilesOn(n);
    for (int g = 0; g < state.NodeGpus(n); ++g) {
      const GpuPart& part = state.Part(n, g);
      if (part.mode == GpuMode::kShared) {
        shared.emplace_back(n, g, part.used, part.capacity - part.used);
        continue;
      }
      if (part.mode != GpuMode::kMig) continue;
      std::map<std::pair<std::string, bool>, int> counts;
      for (size_t i = 0; i < part.layout.size(); ++i) {
        const int p = part.layout[i].profile;
        if (p < 0 || p >= static_cast<int>(profiles.size())) continue;
        ++counts[{profiles[p].name, part.owners[i] != 0}];
      }
      for (const auto& [key, count] : counts) {
        out.Sample("loom_gpu_slices",
                   {{"node", node},
                    {"gpu", std::to_string(g)},
                    {"GPU_I_PROFILE", key.first},
                    {"state", key.second ? "used" : "free"}},
                   count);
      }
    }
    return true;
  });
  out.Family("loom_gpu_shared_bytes",
             "Memory of time-shared GPUs: set aside for their tasks (used) "
             "or left (free).",
             MetricType::kGauge);
  for (const auto& [n, g, used, left] : shared) {
    for (const auto& [s, v] :
         {std::pair<const char*, int64_t>{"used", used}, {"free", left}}) {
      out.Sample("loom_gpu_shared_bytes",
                 {{"node", cluster.nodes[n].name},
                  {"gpu", std::to_string(g)},
                  {"state", s}},
                 static_cast<double>(v));
    }
  }
}

}  // namespace loom
