#include "loom/http/fair_work_pool.h"

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace loom::http {
namespace {

TEST(FairWorkPool, OneKeyWithManyTasksDoesNotDelayAnother) {
  FairWorkPool pool(
      {.threads = 2, .max_running_per_key = 1, .max_queued_per_key = 100});
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> hog_ran{0};
  // "hog" queues 50 tasks that block; only one of them may run at a time.
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(pool.Submit("hog", [&, released] {
      ++hog_ran;
      released.wait();
    }));
  }
  std::promise<void> other_ran;
  ASSERT_TRUE(pool.Submit("other", [&] { other_ran.set_value(); }));
  EXPECT_EQ(other_ran.get_future().wait_for(std::chrono::seconds(5)),
            std::future_status::ready);
  EXPECT_EQ(hog_ran.load(), 1);
  release.set_value();
  pool.Stop();
}

TEST(FairWorkPool, RefusesWhatIsOverAKeysQueue) {
  FairWorkPool pool(
      {.threads = 1, .max_running_per_key = 1, .max_queued_per_key = 2});
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> started;
  ASSERT_TRUE(pool.Submit("a", [&, released] {
    started.set_value();
    released.wait();
  }));
  started.get_future().wait();
  EXPECT_TRUE(pool.Submit("a", [] {}));
  EXPECT_TRUE(pool.Submit("a", [] {}));
  EXPECT_FALSE(pool.Submit("a", [] {}));  // two wait already
  EXPECT_TRUE(pool.Submit("b", [] {}));   // another key is not affected
  EXPECT_EQ(pool.queued(), 3u);
  release.set_value();
  pool.Stop();
  EXPECT_FALSE(pool.Submit("a", [] {}));  // stopped
}

TEST(FairWorkPool, RunsEveryTask) {
  std::atomic<int> ran{0};
  {
    FairWorkPool pool({.threads = 3, .max_queued_per_key = 1000});
    for (int i = 0; i < 300; ++i) {
      ASSERT_TRUE(pool.Submit(std::to_string(i % 7), [&] { ++ran; }));
    }
    while (ran.load() < 300) std::this_thread::yield();
  }
  EXPECT_EQ(ran.load(), 300);
}

}  // namespace
}  // namespace loom::http
