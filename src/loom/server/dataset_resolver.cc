#include "loom/server/dataset_resolver.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace loom {

DatasetResolver::DatasetResolver(DatasetLister* lister, absl::Duration timeout)
    : lister_(lister), timeout_(timeout), thread_([this] { Run(); }) {}

DatasetResolver::~DatasetResolver() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DatasetResolver::Ask(DatasetAsk ask) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    asks_.push_back(std::move(ask));
  }
  cv_.notify_all();
}

std::vector<DatasetAnswer> DatasetResolver::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DatasetAnswer> out = std::move(answers_);
  answers_.clear();
  return out;
}

void DatasetResolver::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return asks_.empty() && !busy_; });
}

void DatasetResolver::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !asks_.empty(); });
    if (stop_) return;
    DatasetAsk ask = std::move(asks_.front());
    asks_.pop_front();
    busy_ = true;
    lock.unlock();
    DatasetAnswer answer;
    answer.job = ask.job;
    answer.run = ask.run;
    for (const std::string& source : ask.sources) {
      absl::StatusOr<std::vector<DatasetEntry>> entries =
          lister_->List(source, ask.user, timeout_);
      if (!entries.ok()) {
        answer.status = entries.status();
        answer.failed_source = source;
        answer.listings.clear();
        break;
      }
      answer.listings.push_back(SummarizeListing(source, *entries));
    }
    lock.lock();
    answers_.push_back(std::move(answer));
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace loom
