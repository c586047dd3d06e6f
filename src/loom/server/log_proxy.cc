#include "loom/server/log_proxy.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

struct AgentRead {
  int status = 0;  // 0: the agent could not be reached
  std::string body;
  std::string error;  // status 0: why
};

AgentRead ReadOnce(const TaskLogRequest& r, int64_t offset,
                   const LogProxyOptions& o) {
  httplib::Client agent("http://" + r.address);
  agent.set_connection_timeout(absl::ToChronoMicroseconds(o.connect_timeout));
  agent.set_read_timeout(absl::ToChronoMicroseconds(o.read_timeout));
  httplib::Headers headers;
  if (!r.agent_auth.empty()) headers.emplace("Authorization", r.agent_auth);
  const std::string path = absl::StrCat(
      "/v1/tasks/", r.task_id, "/logs?stream=", r.stream, "&offset=", offset,
      "&process=", r.process, "&limit=", o.chunk);
  AgentRead out;
  // The agent's answer is read up to one chunk past the limit (an older
  // agent that ignores `limit` sends everything): never unbounded.
  const size_t cap = static_cast<size_t>(o.chunk) + 1;
  httplib::Result res =
      agent.Get(path, headers, [&](const char* data, size_t len) {
        out.body.append(data,
                        std::min(len, cap - std::min(cap, out.body.size())));
        return out.body.size() < cap;
      });
  if (res) {
    out.status = res->status;
  } else if (res.error() == httplib::Error::Canceled && !out.body.empty()) {
    out.status = 200;  // stopped reading at the cap
  } else {
    out.error = httplib::to_string(res.error());
    out.body.clear();
  }
  if (out.body.size() > static_cast<size_t>(o.chunk)) {
    out.body.resize(static_cast<size_t>(o.chunk));
  }
  return out;
}

void ReplyJson(http::HttpResponse& res, int status, const std::string& code,
               const std::string& message) {
  res.status = status;
  res.set_content(
      nlohmann::json{{"error", {{"code", code}, {"message", message}}}}.dump(
          -1, ' ', false, nlohmann::json::error_handler_t::replace),
      "application/json");
}

// The agent's error as ours: its status, its message.
void PassError(const TaskLogRequest& r, const AgentRead& a,
               http::HttpResponse& res) {
  if (a.status == 0) {
    res.set_header("Retry-After", "1");
    return ReplyJson(res, 503, "unavailable",
                     absl::StrCat("cannot reach the agent of node ", r.node,
                                  " at ", r.address, ": ", a.error));
  }
  std::string code = "agent_error";
  std::string message = a.body.substr(0, 300);
  nlohmann::json j = nlohmann::json::parse(a.body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    code = j["error"].value("code", code);
    message = j["error"].value("message", message);
  }
  const int status = a.status >= 400 && a.status < 600 ? a.status : 502;
  ReplyJson(res, status, code,
            absl::StrCat("agent of node ", r.node, ": ", message));
}

struct FollowState {
  TaskLogRequest request;
  LogProxyOptions options;
  std::function<bool()> task_live;
  std::function<bool()> caller_allowed;
  int64_t offset = 0;
  absl::Time failing_since = absl::InfinitePast();
};

}  // namespace

void ServeTaskLogs(const TaskLogRequest& request,
                   std::function<bool()> task_live,
                   std::function<bool()> caller_allowed,
                   const LogProxyOptions& options, http::HttpResponse& res) {
  // Whether the task may still write is read before its log, so that what
  // it wrote before it ended is never missed.
  const bool live_before = task_live();
  AgentRead first = ReadOnce(request, request.offset, options);
  if (first.status != 200) return PassError(request, first, res);
  const bool full = static_cast<int64_t>(first.body.size()) >= options.chunk;
  if (!full && (!request.follow || !live_before)) {
    res.status = 200;
    res.set_content(std::move(first.body), "text/plain");
    return;
  }
  auto state = std::make_shared<FollowState>();
  state->request = request;
  state->options = options;
  state->task_live = std::move(task_live);
  state->caller_allowed = std::move(caller_allowed);
  state->offset = request.offset;
  auto pending = std::make_shared<std::string>(std::move(first.body));
  res.status = 200;
  res.set_stream("text/plain", [state, pending]() {
    http::StreamChunk out;
    if (!pending->empty()) {
      out.data = std::move(*pending);
      pending->clear();
      state->offset += static_cast<int64_t>(out.data.size());
      out.next_poll = absl::ZeroDuration();
      return out;
    }
    if (!state->caller_allowed()) {
      out.done = true;  // the token was revoked: the stream ends with it
      return out;
    }
    const bool live = state->request.follow && state->task_live();
    AgentRead a = ReadOnce(state->request, state->offset, state->options);
    if (a.status != 200) {
      const absl::Time now = absl::Now();
      if (state->failing_since == absl::InfinitePast()) {
        state->failing_since = now;
      }
      if (!live || now - state->failing_since > state->options.give_up_after) {
        out.data = absl::StrCat(
            "\nloom: the log of task ", state->request.task_id,
            " cannot be read from the agent of node ", state->request.node,
            " (", a.status == 0 ? a.error : absl::StrCat("HTTP ", a.status),
            "); the stream ends here\n");
        out.done = true;
      } else {
        out.next_poll = absl::Seconds(1);
      }
      return out;
    }
    state->failing_since = absl::InfinitePast();
    const bool full =
        static_cast<int64_t>(a.body.size()) >= state->options.chunk;
    state->offset += static_cast<int64_t>(a.body.size());
    out.data = std::move(a.body);
    if (full) {
      out.next_poll = absl::ZeroDuration();
    } else if (!live) {
      out.done = true;  // all it wrote is out, and it writes no more
    } else {
      out.next_poll = state->options.follow_poll;
    }
    return out;
  });
}

}  // namespace loom
