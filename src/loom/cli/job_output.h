#pragma once

// The output of a job's tasks on the terminal, as `srun` prints it
// (docs/cli.md, "loom run --wait"): every task's and process's stdout and
// stderr streamed live while the job runs, line by line, with `-l` each
// line led by its rank ("3: loss 0.12"), as `srun -l`.

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "loom/client/api_client.h"
#include "nlohmann/json.hpp"

namespace loom {

// Cuts a stream of bytes into whole lines, each led by `prefix` ("" for
// none), so that lines of several streams never mix mid-line. Pure.
class LinePrefixer {
 public:
  explicit LinePrefixer(std::string prefix) : prefix_(std::move(prefix)) {}
  // The whole lines `chunk` completes (with their '\n'), prefixed; the rest
  // is kept for the next chunk.
  std::string Feed(std::string_view chunk);
  // What is left, as a last line (a '\n' added), or "".
  std::string Flush();

 private:
  const std::string prefix_;
  std::string partial_;
};

// Follows the output of a job's tasks: one stream per task, process and
// stdout/stderr, each on its own thread with its own client. `Follow` is
// called with the job's JSON as often as the caller polls it and starts
// the streams of tasks it has not seen (a restarted job's new run too).
//
// Thread-safety: `Follow` and `Finish` from one thread; the streams write
// to `out` and `err` under one lock.
class JobOutputFollower {
 public:
  using ClientFactory = std::function<std::unique_ptr<ApiClient>()>;
  JobOutputFollower(ClientFactory make_client, int64_t job, bool label,
                    std::ostream& out, std::ostream& err);
  ~JobOutputFollower();  // `Finish(0)` when not called
  JobOutputFollower(const JobOutputFollower&) = delete;
  JobOutputFollower& operator=(const JobOutputFollower&) = delete;

  void Follow(const nlohmann::json& job);
  // Waits up to `timeout` for every stream to end (the server ends them
  // when their task has ended). Returns false when some did not: they are
  // abandoned (their output stops).
  bool Finish(absl::Duration timeout);

 private:
  // What the streams' threads share with the follower: kept alive by them
  // too, so that an abandoned stream outlives the follower safely. Nothing
  // is written once `abandoned` is set (under `mu`).
  struct Shared {
    ClientFactory make_client;
    int64_t job = 0;
    std::ostream* out = nullptr;
    std::ostream* err = nullptr;
    std::mutex mu;
    bool abandoned = false;
  };
  struct Stream {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  static void Run(std::shared_ptr<Shared> shared,
                  std::shared_ptr<Stream> stream, LogRequest request,
                  std::string prefix);

  const bool label_;
  std::shared_ptr<Shared> shared_;
  std::set<std::string> followed_;  // task ids
  std::vector<std::shared_ptr<Stream>> streams_;
};

}  // namespace loom
