#include "loom/http/fair_work_pool.h"

#include <algorithm>

namespace loom::http {

FairWorkPool::FairWorkPool(Options options) : options_(options) {
  for (int i = 0; i < std::max(1, options_.threads); ++i) {
    threads_.emplace_back([this] { Run(); });
  }
}

FairWorkPool::~FairWorkPool() { Stop(); }

bool FairWorkPool::Submit(const std::string& key, std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || queued_ >= options_.max_queued) return false;
    KeyState& k = keys_[key];
    // Waiting beside those running: counted together, so that the limit
    // does not depend on how fast a thread picked up the first ones.
    const int may_run = options_.max_running_per_key > 0
                            ? options_.max_running_per_key
                            : static_cast<int>(threads_.size());
    if (static_cast<int>(k.tasks.size()) + k.running >=
        options_.max_queued_per_key + may_run) {
      if (k.tasks.empty() && k.running == 0) keys_.erase(key);
      return false;
    }
    k.tasks.push_back(std::move(task));
    ++queued_;
    if (!k.ready && CanRun(k)) {
      k.ready = true;
      ready_.push_back(key);
    }
  }
  cv_.notify_one();
  return true;
}

void FairWorkPool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  threads_.clear();
  keys_.clear();
  ready_.clear();
  queued_ = 0;
}

size_t FairWorkPool::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_;
}

void FairWorkPool::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
    if (stopping_) return;
    const std::string key = std::move(ready_.front());
    ready_.pop_front();
    KeyState& k = keys_[key];
    std::function<void()> task = std::move(k.tasks.front());
    k.tasks.pop_front();
    --queued_;
    ++k.running;
    // Round-robin: a key with more to run goes to the back of the line.
    k.ready = CanRun(k);
    if (k.ready) ready_.push_back(key);
    lock.unlock();
    task();
    task = nullptr;  // captured state goes before the lock is taken
    lock.lock();
    KeyState& after = keys_[key];
    --after.running;
    if (!after.ready && CanRun(after)) {
      after.ready = true;
      ready_.push_back(key);
      cv_.notify_one();
    }
    if (after.tasks.empty() && after.running == 0) keys_.erase(key);
  }
}

}  // namespace loom::http
