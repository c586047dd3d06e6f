#pragma once

// The versions of a job's datasets, found off the controller's lock
// (docs/datasets.md): the controller asks for a job's run, a thread of the
// resolver lists each source through a `DatasetLister`, and the controller
// takes the results at its next tick, as `ImageResolver` resolves images
// before a submit is accepted.

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "loom/core/job.h"
#include "loom/server/dataset_lister.h"

namespace loom {

struct DatasetAsk {
  JobId job = 0;
  int run = 0;  // the job's restart count when asked
  std::vector<std::string> sources;
  std::string user;  // the job's Unix user: whose rights list a local path
};

struct DatasetAnswer {
  JobId job = 0;
  int run = 0;
  // OK: `listings` has one per source, in order. Otherwise the first
  // source that failed and why.
  absl::Status status;
  std::string failed_source;
  std::vector<DatasetListing> listings;
};

// Thread-safe. One worker thread, started at construction and joined by
// the destructor (an ask in progress finishes first: at most `timeout`).
class DatasetResolver {
 public:
  DatasetResolver(DatasetLister* lister, absl::Duration timeout);
  ~DatasetResolver();
  DatasetResolver(const DatasetResolver&) = delete;
  DatasetResolver& operator=(const DatasetResolver&) = delete;

  void Ask(DatasetAsk ask);
  // The answers since the last call, oldest first.
  std::vector<DatasetAnswer> Take();
  // Blocks until every ask so far has its answer (tests).
  void WaitIdle();

 private:
  void Run();

  DatasetLister* const lister_;
  const absl::Duration timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<DatasetAsk> asks_;         // guarded by mu_
  std::vector<DatasetAnswer> answers_;  // guarded by mu_
  bool busy_ = false;                   // guarded by mu_
  bool stop_ = false;                   // guarded by mu_
  std::thread thread_;
};

}  // namespace loom
