#include "loom/server/chaos.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace loom {

absl::StatusOr<nlohmann::json> Chaos(
    Controller& controller, const nlohmann::json& body,
    const std::function<std::string(const std::string&)>& agent_auth) {
  auto text_field = [&](const char* key) -> std::string {
    auto it = body.find(key);
    return it != body.end() && it->is_string() ? it->get<std::string>() : "";
  };
  const std::string action = text_field("action");
  static constexpr const char* kActions[] = {
      "kill_agent", "freeze_heartbeats", "thaw_heartbeats",
      "kill_task",  "fail_gpu",          "heal_gpu",
      "hold_gpu",   "reset_gpu",         "slow_agent",
      "heal"};
  if (std::find(std::begin(kActions), std::end(kActions), action) ==
      std::end(kActions)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "action: '", action,
        "' is not one of kill_agent, freeze_heartbeats, thaw_heartbeats, "
        "kill_task, fail_gpu, heal_gpu, hold_gpu, reset_gpu, slow_agent, "
        "heal"));
  }
  auto int_field = [&](const char* key) -> absl::StatusOr<int64_t> {
    auto it = body.find(key);
    if (it == body.end() || !it->is_number_integer() ||
        (it->is_number_unsigned() &&
         it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, ": required, a whole number, for ", action));
    }
    return it->get<int64_t>();
  };
  std::string node = text_field("node");
  std::string path = "/v1/faults";
  nlohmann::json fault;
  if (action == "kill_task") {
    absl::StatusOr<int64_t> job = int_field("job");
    if (!job.ok()) return job.status();
    int64_t task = 0;
    if (body.contains("task")) {
      absl::StatusOr<int64_t> t = int_field("task");
      if (!t.ok()) return t.status();
      task = *t;
    }
    absl::StatusOr<nlohmann::json> j = controller.GetJob(*job, absl::Now());
    if (!j.ok()) return j.status();
    std::string task_id;
    if ((*j)["placement"].is_object()) {
      for (const nlohmann::json& t : (*j)["placement"]["tasks"]) {
        if (t.value("index", -1) == task && t.value("state", "") == "running") {
          node = t.value("node", "");
          task_id = t.value("task_id", "");
        }
      }
    }
    if (task_id.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", *job, " has no running task ", task));
    }
    path = absl::StrCat("/v1/tasks/", task_id, "/stop?node=", node);
    fault = {{"signal", 9}, {"grace_ms", 0}};
  } else {
    if (node.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("node: required for ", action));
    }
    fault["node"] = node;
    if (action == "kill_agent") {
      fault["exit"] = true;
    } else if (action == "freeze_heartbeats" || action == "thaw_heartbeats") {
      fault["drop_heartbeats"] = action == "freeze_heartbeats";
    } else if (action == "fail_gpu" || action == "heal_gpu" ||
               action == "hold_gpu" || action == "reset_gpu") {
      absl::StatusOr<int64_t> gpu = int_field("gpu");
      if (!gpu.ok()) return gpu.status();
      fault[action] = *gpu;
    } else if (action == "slow_agent") {
      absl::StatusOr<int64_t> ms = int_field("delay_ms");
      if (!ms.ok()) return ms.status();
      fault["delay_ms"] = *ms;
    } else {  // heal
      fault["clear"] = true;
    }
  }
  absl::StatusOr<std::string> address = controller.NodeAddress(node);
  if (!address.ok()) return address.status();
  httplib::Client agent("http://" + *address);
  agent.set_connection_timeout(3);
  agent.set_read_timeout(10);
  httplib::Headers headers;
  if (const std::string key = agent_auth(node); !key.empty()) {
    headers.emplace("Authorization", key);
  }
  httplib::Result r =
      agent.Post(path, headers, fault.dump(), "application/json");
  if (!r) {
    return absl::UnavailableError(
        absl::StrCat("the agent of ", node, " at ", *address,
                     " cannot be reached: ", httplib::to_string(r.error())));
  }
  nlohmann::json answer = nlohmann::json::parse(r->body, nullptr, false);
  if (r->status >= 300) {
    std::string message = r->body.substr(0, 300);
    if (answer.is_object() && answer.contains("error") &&
        answer["error"].is_object()) {
      message = answer["error"].value("message", message);
    }
    return r->status == 400   ? absl::InvalidArgumentError(message)
           : r->status == 404 ? absl::NotFoundError(message)
                              : absl::FailedPreconditionError(absl::StrCat(
                                    "the agent refused: ", message));
  }
  std::fprintf(stderr, "loom server: chaos: %s on %s%s\n", action.c_str(),
               node.c_str(),
               action == "kill_task" ? (" (" + path + ")").c_str() : "");
  return nlohmann::json{{"ok", true}, {"action", action}, {"node", node}};
}

}  // namespace loom
