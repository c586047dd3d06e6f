// `GET /v1/tasks/{id}/logs` of the agent API: a task's output, read from an
// offset (at most `limit` bytes), or followed until the process ends.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "httplib.h"
#include "loom/agent/agent_api.h"
#include "loom/agent/api_reply.h"
#include "loom/agent/json_values.h"
#include "loom/agent/launch_request.h"

namespace loom {
namespace {

constexpr absl::Duration kFollowPoll = absl::Milliseconds(100);

}  // namespace

void AgentApi::HandleLogs(const httplib::Request& req, httplib::Response& res) {
  const std::string id = TaskIdOf(req, res);
  if (id.empty()) return;
  const std::string stream =
      req.has_param("stream") ? req.get_param_value("stream") : "stdout";
  if (stream != "stdout" && stream != "stderr") {
    SendError(
        res, 400, "invalid_argument",
        absl::StrCat("stream: must be stdout or stderr, got '", stream, "'"),
        "stream");
    return;
  }
  int64_t offset = 0;
  if (req.has_param("offset") &&
      (!absl::SimpleAtoi(req.get_param_value("offset"), &offset) ||
       offset < 0)) {
    SendError(res, 400, "invalid_argument",
              "offset: must be a byte offset (a whole number >= 0)", "offset");
    return;
  }
  int process = 0;
  if (req.has_param("process") &&
      (!absl::SimpleAtoi(req.get_param_value("process"), &process) ||
       process < 0 || process >= kMaxProcesses)) {
    SendError(res, 400, "invalid_argument",
              "process: must be a process index of the task", "process");
    return;
  }
  // At most this many bytes (the server reads logs in bounded pieces).
  int64_t limit = 0;
  if (req.has_param("limit") &&
      (!absl::SimpleAtoi(req.get_param_value("limit"), &limit) || limit < 1)) {
    SendError(res, 400, "invalid_argument",
              "limit: must be a positive byte count", "limit");
    return;
  }
  const std::string follow_text = req.get_param_value("follow");
  const bool follow = follow_text == "1" || follow_text == "true";
  absl::StatusOr<AgentNode*> found =
      nodes_.ForTask(req.get_param_value("node"), id);
  if (!found.ok()) {
    SendStatus(res, found.status(), "node");
    return;
  }
  AgentNode* node = *found;
  absl::StatusOr<std::string> known =
      runner_.LogPath(*node, id, process, stream == "stderr");
  if (!known.ok()) {
    SendStatus(res, known.status(), "process");
    return;
  }
  std::string path = *std::move(known);
  if (path.empty()) path = TaskLogPath(*node, id, process, stream == "stderr");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    SendError(res, 404, "not_found",
              absl::StrCat(
                  "no ", stream, " for task ", id, " on node ", node->name,
                  process > 0 ? absl::StrCat(" (process ", process, ")") : ""));
    return;
  }
  auto fd_holder = std::shared_ptr<int>(new int(fd), [](int* p) {
    ::close(*p);
    delete p;
  });
  res.status = 200;
  if (!follow) {
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      SendError(res, 500, "internal", absl::StrCat("stat ", path));
      return;
    }
    const int64_t size = st.st_size;
    if (offset >= size) {
      res.set_content("", "text/plain");
      return;
    }
    res.set_content_provider(
        static_cast<size_t>(limit > 0 ? std::min(limit, size - offset)
                                      : size - offset),
        "text/plain",
        [fd_holder, offset](size_t off, size_t length,
                            httplib::DataSink& sink) {
          char buf[64 * 1024];
          const size_t want = std::min(length, sizeof(buf));
          const ssize_t n = ::pread(*fd_holder, buf, want,
                                    offset + static_cast<int64_t>(off));
          if (n <= 0) return false;
          return sink.write(buf, static_cast<size_t>(n));
        });
    return;
  }
  // Each stream holds a thread of the API server: leave most of them to
  // launches and stops.
  const int max_follows = std::max(1, options_.http_threads / 2);
  if (follows_.fetch_add(1) >= max_follows) {
    follows_.fetch_sub(1);
    res.set_header("Retry-After", "1");
    SendError(res, 503, "unavailable",
              absl::StrCat("too many log streams open (", max_follows,
                           "); try again later or read without follow"));
    return;
  }
  auto position = std::make_shared<int64_t>(offset);
  res.set_chunked_content_provider(
      "text/plain",
      [this, fd_holder, position, node, id, process](size_t,
                                                     httplib::DataSink& sink) {
        char buf[64 * 1024];
        while (true) {
          if (stopping_.load()) {
            sink.done();
            return true;
          }
          // Whether it ended is read before the file, so that output written
          // before the end is never missed.
          const bool ended = runner_.ProcessEnded(*node, id, process);
          const ssize_t n = ::pread(*fd_holder, buf, sizeof(buf), *position);
          if (n < 0) return false;
          if (n > 0) {
            *position += n;
            return sink.write(buf, static_cast<size_t>(n));
          }
          if (ended) {
            sink.done();
            return true;
          }
          if (sink.is_writable && !sink.is_writable()) return false;
          absl::SleepFor(kFollowPoll);
        }
      },
      [this](bool) { follows_.fetch_sub(1); });
}

}  // namespace loom
