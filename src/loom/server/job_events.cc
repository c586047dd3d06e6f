#include "loom/server/job_events.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "loom/server/job_record.h"

namespace loom {

void JobEvents::Add(absl::Time t, std::string message, std::string_view kind) {
  if (!events_.empty() && (events_.back().message == message ||
                           (!kind.empty() && message.rfind(kind, 0) == 0 &&
                            events_.back().message.rfind(kind, 0) == 0))) {
    JobEvent& last = events_.back();
    ++last.count;
    last.last_time = t;
    last.message = std::move(message);
    return;
  }
  if (events_.size() >= kMaxJobEvents) {
    events_.erase(events_.begin());
    ++dropped_;
  }
  events_.push_back({t, std::move(message), 1, t});
}

nlohmann::json JobEvents::ToJson() const {
  nlohmann::json out = nlohmann::json::array();
  for (const JobEvent& e : events_) {
    nlohmann::json j = {{"time", FormatTimestamp(e.time)},
                        {"message", e.message}};
    if (e.count > 1) {
      j["count"] = e.count;
      j["last_time"] = FormatTimestamp(e.last_time);
    }
    out.push_back(std::move(j));
  }
  return out;
}

absl::StatusOr<JobEvents> JobEvents::FromJson(const nlohmann::json& list,
                                              int64_t dropped) {
  if (!list.is_array()) {
    return absl::InvalidArgumentError("events: must be a list");
  }
  JobEvents out;
  out.dropped_ = dropped < 0 ? 0 : dropped;
  size_t skip = 0;
  if (list.size() > kMaxJobEvents) {
    skip = list.size() - kMaxJobEvents;
    out.dropped_ += static_cast<int64_t>(skip);
  }
  for (size_t i = skip; i < list.size(); ++i) {
    const nlohmann::json& e = list[i];
    if (!e.is_object() || !e.contains("time") || !e["time"].is_string() ||
        !e.contains("message") || !e["message"].is_string()) {
      return absl::InvalidArgumentError(
          "events: each must be {\"time\", \"message\"}");
    }
    absl::StatusOr<absl::Time> t = ParseTimestamp(e["time"].get<std::string>());
    if (!t.ok()) return t.status();
    JobEvent ev{*t, e["message"].get<std::string>(), 1, *t};
    if (auto c = e.find("count"); c != e.end()) {
      if (!c->is_number_integer() || c->get<int64_t>() < 1) {
        return absl::InvalidArgumentError(
            "events: count must be a positive integer");
      }
      ev.count = c->get<int64_t>();
    }
    if (auto l = e.find("last_time"); l != e.end() && l->is_string()) {
      absl::StatusOr<absl::Time> last = ParseTimestamp(l->get<std::string>());
      if (!last.ok()) return last.status();
      ev.last_time = *last;
    }
    out.events_.push_back(std::move(ev));
  }
  return out;
}

}  // namespace loom
