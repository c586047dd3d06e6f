#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/time/time.h"
#include "loom/http/http_message.h"

namespace loom {

// What `GET /v1/jobs/{id}/logs` asks of a task's agent.
struct TaskLogRequest {
  std::string address;     // the agent, "host:port"
  std::string node;        // for messages
  std::string task_id;     // "<job>.<index>.<restart>"
  std::string agent_auth;  // Authorization header value ("": none)
  std::string stream = "stdout";
  int64_t process = 0;
  int64_t offset = 0;
  bool follow = false;
};

struct LogProxyOptions {
  // Each read of the agent: connect and answer deadlines. Short: a frozen
  // agent costs a log reader a few seconds, never a thread for hours.
  absl::Duration connect_timeout = absl::Seconds(2);
  absl::Duration read_timeout = absl::Seconds(5);
  // Bytes asked of the agent per read.
  int64_t chunk = 1 << 20;
  // A follow stream polls this often while there is nothing new.
  absl::Duration follow_poll = absl::Milliseconds(300);
  // A follow stream whose agent cannot be read for this long ends, saying
  // so in the stream.
  absl::Duration give_up_after = absl::Seconds(30);
};

// Answers a log read from the task's agent, in `res`. The first read is
// made here: an agent that cannot be reached gives 503, and the agent's
// own errors (404 no such task or stream, 400) are passed on with their
// status and message, never as log text. The rest of a log longer than one
// read, and a follow, are sent as a stream that polls the agent with
// bounded reads (no thread held between polls). A follow ends once
// `task_live` says the task can no longer write and everything it wrote
// was sent, or as soon as `caller_allowed` turns false (a revoked token).
// Both callbacks run on stream threads and must be cheap and thread-safe.
void ServeTaskLogs(const TaskLogRequest& request,
                   std::function<bool()> task_live,
                   std::function<bool()> caller_allowed,
                   const LogProxyOptions& options, http::HttpResponse& res);

}  // namespace loom
