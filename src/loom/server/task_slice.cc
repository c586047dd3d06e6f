#include "loom/server/task_slice.h"

#include <string>
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

}  // namespace loom
