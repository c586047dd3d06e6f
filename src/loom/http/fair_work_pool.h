#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace loom::http {

// A fixed set of threads that run tasks, fairly between keys (the callers a
// server tells apart: a user's token, a node's credential, an address):
// keys take turns round-robin, at most `max_running_per_key` tasks of one
// key run at once, and at most `max_queued_per_key` wait, so that one
// caller with many requests delays only itself. Thread-safe.
class FairWorkPool {
 public:
  struct Options {
    int threads = 4;
    int max_running_per_key = 0;  // 0: no limit but the thread count
    int max_queued_per_key = 64;  // waiting, beside those running
    size_t max_queued = 100000;   // waiting, all keys together
  };

  explicit FairWorkPool(Options options);
  ~FairWorkPool();
  FairWorkPool(const FairWorkPool&) = delete;
  FairWorkPool& operator=(const FairWorkPool&) = delete;

  // Queues `task` under `key`; false (and `task` is dropped) when the key's
  // queue or the pool's is full, or the pool is stopping.
  bool Submit(const std::string& key, std::function<void()> task);
  // Runs no more tasks (queued ones are dropped) and joins the threads;
  // waits for running tasks.
  void Stop();
  // Tasks waiting (not running), all keys together.
  size_t queued() const;

 private:
  struct KeyState {
    std::deque<std::function<void()>> tasks;
    int running = 0;
    bool ready = false;  // in `ready_`
  };
  void Run();
  bool CanRun(const KeyState& k) const {
    return !k.tasks.empty() && (options_.max_running_per_key <= 0 ||
                                k.running < options_.max_running_per_key);
  }

  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, KeyState> keys_;
  std::deque<std::string> ready_;  // keys with a task that may run now
  size_t queued_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace loom::http
