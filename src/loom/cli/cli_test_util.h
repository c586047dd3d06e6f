#pragma once

// What the cli tests share: a fixed "now", sample replies, and `VerbTest`,
// which runs whole verbs as `loom ARGS...` would against an in-process fake
// server.

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace httplib {
class Server;
}  // namespace httplib

namespace loom {

inline const absl::Time kNow =
    absl::FromUnixSeconds(1795969200);  // 2026-11-29 16:20Z

// `t` as the server writes times: RFC 3339 in UTC, with milliseconds.
std::string Rfc3339(absl::Time t);

// A `GET /v1/jobs` answer: job 41 running on 4 nodes, job 42 pending.
nlohmann::json SampleJobs();

// An HTTP server on a free loopback port, in a thread of its own. Add the
// routes to `server()` before `Start`.
class FakeServer {
 public:
  FakeServer();
  ~FakeServer();
  httplib::Server& server() { return *server_; }
  void Start();
  void Stop();
  std::string url() const;

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

struct CliResult {
  int rc = -1;
  std::string out;
  std::string err;
};

// A fake server answering the job, node and log routes, and `Run` to drive
// the verbs against it as user carol.
class VerbTest : public ::testing::Test {
 protected:
  using Json = nlohmann::json;

  void SetUp() override;
  void TearDown() override;

  // Parses `args` as `loom ARGS...` would and runs the verb.
  CliResult Run(std::vector<std::string> args,
                const std::atomic<bool>* interrupted = nullptr);

  // Writes `text` to a temporary file, removed by `TearDown`; returns its path.
  std::string TempFile(const std::string& name, const std::string& text);

  FakeServer fake_;
  std::map<std::string, std::string> env_;
  std::vector<std::string> files_;
  std::mutex mu_;
  Json submitted_;
  std::string submit_user_;
  std::string list_query_;
  std::vector<int> released_;
  Json checkpoint_;
  std::vector<Json> states_ = {{{"id", 42}, {"state", "running"}}};
  size_t polls_ = 0;
};

}  // namespace loom
