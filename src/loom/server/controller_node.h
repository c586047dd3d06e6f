#pragma once

// What the controller keeps of each node beyond the cluster spec (its
// liveness, modes, what its agent last reported) and of each array job
// (which elements exist, run and ended). Plain data: the controller's
// mutex guards them (controller.h).

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace loom {

// A node as the controller sees it (`Controller::Node`).
struct ControllerNode {
  enum class State { kUnknown, kUp, kDown };
  State state = State::kUnknown;
  bool cordoned = false;
  bool draining = false;
  // Silent longer than `suspect_after` (still up).
  bool suspect = false;
  // Liveness probes (controller_liveness.cc): one in flight, when the
  // last was sent, and what the last answer was (not persisted).
  bool probing = false;
  absl::Time probed_at = absl::InfinitePast();
  enum class Probe { kNone, kAnswered, kRefused, kNoAnswer };
  Probe probe = Probe::kNone;
  // Drained by a failed health check (until an operator uncordons it).
  bool unhealthy = false;
  std::vector<std::string> health;  // the agent's last health problems
  // GPUs whose change of MIG mode waits, as the agent last said (not
  // persisted): no new work until there are none (docs/agent.md "MIG").
  std::vector<int> mig_waits;
  std::string reason;
  std::string address;
  std::string hostname;
  bool emulated = false;
  absl::Time last_heartbeat = absl::InfinitePast();
  absl::flat_hash_set<int> master_ports;
  // What the agent last said of its images (not persisted: agents say it
  // again when they register): [{digest, refs, bytes}], and the pulls
  // asked of it, [{image, digest, state, phase, bytes_done, bytes_total,
  // error}].
  nlohmann::json images = nlohmann::json::array();
  nlohmann::json image_pulls = nlohmann::json::array();
  // What the agent says of itself (not persisted either): its labels
  // (gpu.model, gpu.driver, ...) and its software stack (driver, cuda,
  // loom); and how that stack differs from its pool's `stack`
  // (`StackDrift`). A node with drift is `drifted`: no new work.
  std::map<std::string, std::string> reported_labels;
  std::map<std::string, std::string> stack;
  std::vector<std::string> drift;
  // The declared part of the stack the node had when it last matched its
  // pool's (persisted). A node still on it when the pool's declared
  // stack changes is `outdated`, not drifted: an upgrade is due, and it
  // keeps working until a maintenance upgrades it (`outdated` says how
  // it differs).
  std::map<std::string, std::string> accepted_stack;
  std::vector<std::string> outdated;
  // The agent's last report of a maintenance command (not persisted:
  // agents say it in every heartbeat).
  struct CommandReport {
    std::string id;
    std::string state;  // running | exited | lost
    std::optional<int> exit_code;
    std::string output;
  };
  CommandReport command;
};

// An array job's elements (controller_arrays.cc, docs/scheduling.md
// "Arrays"): elements exist (as records of their own, IDs `array + 1 +
// position`) only from when they are queued, a window at a time.
struct ArrayProgress {
  std::vector<int> indices;  // the spec's, sorted
  int max_running = 0;       // %max; 0: none
  // Positions (in `indices`): not yet elements; cancelled before they
  // were; queued in the scheduler and not started yet.
  absl::btree_set<int> unfed, cancelled, queued;
  int active = 0;  // elements that exist and are not final (held too)
  int held = 0;    // of which held
  int succeeded = 0, failed = 0, cancelled_elements = 0;
};
}  // namespace loom
