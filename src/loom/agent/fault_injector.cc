#include "loom/agent/fault_injector.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "loom/agent/emulated_mig_control.h"
#include "loom/agent/json_values.h"
#include "loom/agent/launch_request.h"

namespace loom {

using json = nlohmann::json;

absl::StatusOr<size_t> FaultInjector::Apply(const json& body,
                                            const std::string& query_node,
                                            std::string* field) {
  // Checked in full before anything changes.
  static constexpr const char* kKeys[] = {
      "node",      "drop_heartbeats", "fail_gpu", "heal_gpu", "hold_gpu",
      "reset_gpu", "delay_ms",        "exit",     "clear"};
  bool any = false;
  for (const auto& item : body.items()) {
    const std::string& key = item.key();
    if (std::find_if(std::begin(kKeys), std::end(kKeys), [&](const char* k) {
          return key == k;
        }) == std::end(kKeys)) {
      if (field != nullptr) *field = key;
      return absl::InvalidArgumentError(
          absl::StrCat("unknown fault '", key,
                       "'; known: drop_heartbeats, fail_gpu, heal_gpu, "
                       "hold_gpu, reset_gpu, delay_ms, exit, clear"));
    }
    if (key != "node") any = true;
  }
  if (!any) {
    if (field != nullptr) *field = "body";
    return absl::InvalidArgumentError(
        "no fault given (drop_heartbeats, fail_gpu, heal_gpu, hold_gpu, "
        "reset_gpu, delay_ms, exit or clear)");
  }
  for (const char* key : {"drop_heartbeats", "exit", "clear"}) {
    if (body.contains(key) && !body[key].is_boolean()) {
      return FieldError(field, key, "must be true or false");
    }
  }
  std::string name = query_node;
  if (auto it = body.find("node");
      name.empty() && it != body.end() && it->is_string()) {
    name = it->get<std::string>();
  }
  absl::StatusOr<std::vector<AgentNode*>> selected = nodes_.Select(name);
  if (!selected.ok()) {
    if (field != nullptr) *field = "node";
    return selected.status();
  }
  const std::vector<AgentNode*>& nodes = *selected;
  std::optional<int64_t> delay;
  if (body.contains("delay_ms")) {
    delay = AsInt(body["delay_ms"]);
    if (!delay || *delay < 0 || *delay > 60000) {
      return FieldError(field, "delay_ms",
                        "must be a whole number of milliseconds from 0 to "
                        "60000");
    }
  }
  std::optional<int> fail_gpu, heal_gpu, hold_gpu, reset_gpu;
  for (const char* key : {"fail_gpu", "heal_gpu", "hold_gpu", "reset_gpu"}) {
    if (!body.contains(key)) continue;
    std::optional<int64_t> g = AsInt(body[key]);
    if (!emulated_) {
      if (field != nullptr) *field = key;
      return absl::FailedPreconditionError(
          absl::StrCat(key,
                       ": only emulated GPUs take injected faults (this "
                       "agent uses NVML)"));
    }
    if (!g || *g < 0 || *g >= static_cast<int64_t>(nodes[0]->gpus.size()) ||
        *g >= 32) {
      return FieldError(field, key,
                        absl::StrCat("must be a GPU index from 0 to ",
                                     nodes[0]->gpus.size() - 1));
    }
    const std::string k = key;
    (k == "fail_gpu"   ? fail_gpu
     : k == "heal_gpu" ? heal_gpu
     : k == "hold_gpu" ? hold_gpu
                       : reset_gpu) = static_cast<int>(*g);
  }

  const bool clear = body.value("clear", false);
  if (clear) {
    api_delay_ms_.store(0);
    for (AgentNode* node : nodes) {
      node->drop_heartbeats.store(false);
      node->failed_gpus.store(0);
      if (auto* mig = dynamic_cast<EmulatedMigControl*>(node->mig.get())) {
        for (const GpuDevice& g : node->gpus) (void)mig->Hold(g.index, false);
      }
      log_("info", node->name, "fault injection: all faults cleared");
      report_soon_(*node);
    }
  }
  if (auto drop = body.find("drop_heartbeats"); drop != body.end()) {
    for (AgentNode* node : nodes) {
      if (node->drop_heartbeats.exchange(drop->get<bool>()) !=
          drop->get<bool>()) {
        log_("info", node->name,
             drop->get<bool>() ? "fault injection: dropping heartbeats"
                               : "fault injection: heartbeats resume");
      }
    }
  }
  if (fail_gpu || heal_gpu) {
    for (AgentNode* node : nodes) {
      if (fail_gpu) node->failed_gpus.fetch_or(1u << *fail_gpu);
      if (heal_gpu) node->failed_gpus.fetch_and(~(1u << *heal_gpu));
      log_("warn", node->name,
           fail_gpu
               ? absl::StrCat("fault injection: GPU ", *fail_gpu, " failed")
               : absl::StrCat("fault injection: GPU ", *heal_gpu,
                              " healthy again"));
      report_soon_(*node);
    }
  }
  if (hold_gpu || reset_gpu) {
    // The emulated MIG control (emulated_mig_control.h): a GPU another
    // process holds open, on which a change of MIG mode waits; a reset.
    for (AgentNode* node : nodes) {
      auto* mig = dynamic_cast<EmulatedMigControl*>(node->mig.get());
      if (mig == nullptr) continue;
      if (hold_gpu) {
        (void)mig->Hold(*hold_gpu, true);
        log_("warn", node->name,
             absl::StrCat("fault injection: GPU ", *hold_gpu,
                          " held open by another process (a change of MIG "
                          "mode waits)"));
      }
      if (reset_gpu) {
        (void)mig->Reset(*reset_gpu);
        log_("warn", node->name,
             absl::StrCat("fault injection: GPU ", *reset_gpu, " reset"));
      }
    }
  }
  if (delay) {
    api_delay_ms_.store(*delay);
    log_("info", "",
         absl::StrCat("fault injection: agent API answers delayed by ", *delay,
                      " ms"));
  }
  if (body.value("exit", false)) {
    // The agent dies as if killed (its tasks keep running, as after a
    // crash): after this answer is on its way.
    log_("warn", "", "fault injection: the agent kills itself (SIGKILL)");
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      kill(getpid(), SIGKILL);
    }).detach();
  }
  return nodes.size();
}

}  // namespace loom
