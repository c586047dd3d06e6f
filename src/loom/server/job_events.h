#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace loom {

// One entry of a job's history (`GET /v1/jobs/{id}/events`). Consecutive
// identical messages are one event with a `count`: `time` is the first of
// them, `last_time` the last.
struct JobEvent {
  absl::Time time;
  std::string message;
  int64_t count = 1;
  absl::Time last_time;  // == `time` while `count` is 1

  bool operator==(const JobEvent&) const = default;
};

// The history of a job, bounded: at most `kMaxJobEvents` events are kept
// (the oldest go first; `dropped` counts them), and a repeat of the last
// message only bumps its count. So a job's record, which holds its history,
// stays small however often something happens to it (docs/api.md, "Job
// events"). Not thread-safe; the controller's lock guards it.
class JobEvents {
 public:
  static constexpr size_t kMaxJobEvents = 100;

  // Records `message` at `t`. With a `kind` (a prefix, such as "checkpoint
  // saved"), a last event of the same kind is replaced by this one and
  // counted, so that a stream of similar reports (each with its own step)
  // is one event that says the latest.
  void Add(absl::Time t, std::string message, std::string_view kind = {});

  const std::vector<JobEvent>& events() const { return events_; }
  // Events dropped from the front to keep the bound.
  int64_t dropped() const { return dropped_; }
  bool empty() const { return events_.empty(); }

  // The API and storage form: a list of
  // {"time", "message"[, "count", "last_time"]}; `dropped` is stored beside
  // it by the caller.
  nlohmann::json ToJson() const;
  // Reads `ToJson`'s form (and older records' {"time", "message"}), keeping
  // the newest `kMaxJobEvents`. InvalidArgument on a malformed list; never
  // throws.
  static absl::StatusOr<JobEvents> FromJson(const nlohmann::json& list,
                                            int64_t dropped);

  bool operator==(const JobEvents&) const = default;

 private:
  std::vector<JobEvent> events_;
  int64_t dropped_ = 0;
};

}  // namespace loom
