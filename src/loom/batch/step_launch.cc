#include "loom/batch/step_launch.h"

#include "absl/strings/str_cat.h"

namespace loom::batch {

using Json = nlohmann::json;

Json StepLaunchToJson(const StepLaunch& l) {
  Json nodes = Json::array();
  for (const StepNodePlan& n : l.plan.nodes) {
    nodes.push_back({{"node", n.node},
                     {"tasks", n.tasks},
                     {"first_procid", n.first_procid}});
  }
  Json alloc = Json::array();
  for (const AllocationNode& a : l.alloc) {
    alloc.push_back({{"name", a.name}, {"host", a.host}});
  }
  return {{"step", l.step},
          {"step_node", l.step_node},
          {"nodes", std::move(nodes)},
          {"ntasks", l.plan.ntasks},
          {"nodelist", l.plan.nodelist},
          {"tasks_per_node", l.plan.tasks_per_node},
          {"alloc", std::move(alloc)},
          {"command", l.command},
          {"env", l.env},
          {"cwd", l.cwd},
          {"master_port", l.master_port}};
}

absl::StatusOr<StepLaunch> StepLaunchFromJson(const Json& j) {
  StepLaunch l;
  try {
    l.step = j.at("step").get<uint32_t>();
    l.step_node = j.at("step_node").get<size_t>();
    for (const Json& n : j.at("nodes")) {
      l.plan.nodes.push_back({n.at("node").get<int>(), n.at("tasks").get<int>(),
                              n.at("first_procid").get<int>()});
    }
    l.plan.ntasks = j.at("ntasks").get<int>();
    l.plan.nodelist = j.at("nodelist").get<std::string>();
    l.plan.tasks_per_node = j.at("tasks_per_node").get<std::string>();
    for (const Json& a : j.at("alloc")) {
      l.alloc.push_back(
          {a.at("name").get<std::string>(), a.at("host").get<std::string>()});
    }
    l.command = j.at("command").get<std::vector<std::string>>();
    l.env = j.at("env").get<Env>();
    l.cwd = j.at("cwd").get<std::string>();
    l.master_port = j.at("master_port").get<int>();
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad launch message: ", e.what()));
  }
  if (l.step_node >= l.plan.nodes.size() || l.command.empty()) {
    return absl::InvalidArgumentError("bad launch message: no such node");
  }
  for (const StepNodePlan& n : l.plan.nodes) {
    if (n.node < 0 || static_cast<size_t>(n.node) >= l.alloc.size() ||
        n.tasks < 1) {
      return absl::InvalidArgumentError("bad launch message: bad plan");
    }
  }
  return l;
}

void LaunchStepTasks(
    StepRunner& runner, const StepLaunch& l, const Env& node_env,
    const std::function<void(uint32_t, const std::string&)>& on_failed) {
  const StepNodePlan& here = l.plan.nodes[l.step_node];
  for (int k = 0; k < here.tasks; ++k) {
    StepTaskSpec spec;
    spec.step = l.step;
    spec.procid = static_cast<uint32_t>(here.first_procid + k);
    spec.argv = l.command;
    spec.env = StepTaskEnvironment(l.env, node_env, l.alloc, l.plan, l.step,
                                   l.step_node, k, l.master_port);
    spec.cwd = l.cwd;
    if (absl::Status st = runner.Start(spec); !st.ok()) {
      on_failed(spec.procid, std::string(st.message()));
    }
  }
}

}  // namespace loom::batch
