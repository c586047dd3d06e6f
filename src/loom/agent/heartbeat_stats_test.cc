// Heartbeat round trips (heartbeat_stats.h): counts, latency percentiles of
// known samples, and windows.

#include "loom/agent/heartbeat_stats.h"

#include <algorithm>
#include <random>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using json = nlohmann::json;

TEST(HeartbeatStatsTest, NothingYet) {
  HeartbeatStats stats;
  const json j = stats.Json(/*reset=*/false);
  EXPECT_EQ(j["heartbeats"]["answered"], 0);
  EXPECT_EQ(j["heartbeats"]["failed"], 0);
  EXPECT_EQ(j["heartbeats"]["latency_ms"],
            (json{{"p50", 0.0}, {"p90", 0.0}, {"p99", 0.0}, {"max", 0.0}}));
  EXPECT_GE(j["window_s"].get<double>(), 0.0);
}

TEST(HeartbeatStatsTest, CountsAndPercentiles) {
  HeartbeatStats stats;
  // 1 .. 100 ms, in no order.
  std::vector<int> ms(100);
  for (int i = 0; i < 100; ++i) ms[i] = i + 1;
  std::shuffle(ms.begin(), ms.end(), std::mt19937(7));
  for (int m : ms) stats.Answered(absl::Milliseconds(m));
  for (int i = 0; i < 3; ++i) stats.Failed();
  const json j = stats.Json(/*reset=*/false);
  EXPECT_EQ(j["heartbeats"]["answered"], 100);
  EXPECT_EQ(j["heartbeats"]["failed"], 3);
  const json& l = j["heartbeats"]["latency_ms"];
  EXPECT_DOUBLE_EQ(l["p50"].get<double>(), 51);
  EXPECT_DOUBLE_EQ(l["p90"].get<double>(), 91);
  EXPECT_DOUBLE_EQ(l["p99"].get<double>(), 100);
  EXPECT_DOUBLE_EQ(l["max"].get<double>(), 100);
  // Reading without a reset changes nothing.
  EXPECT_EQ(stats.Json(/*reset=*/false)["heartbeats"], j["heartbeats"]);
}

TEST(HeartbeatStatsTest, FractionsOfAMillisecond) {
  HeartbeatStats stats;
  stats.Answered(absl::Microseconds(250));
  stats.Answered(absl::Microseconds(1500));
  const json l = stats.Json(false)["heartbeats"]["latency_ms"];
  EXPECT_DOUBLE_EQ(l["p50"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(l["max"].get<double>(), 1.5);
  // Two samples: p50 is the upper one, the lowest is never a percentile.
  EXPECT_DOUBLE_EQ(l["p90"].get<double>(), 1.5);
}

TEST(HeartbeatStatsTest, AResetStartsANewWindow) {
  HeartbeatStats stats;
  stats.Answered(absl::Milliseconds(40));
  stats.Failed();
  absl::SleepFor(absl::Milliseconds(300));
  const json first = stats.Json(/*reset=*/true);
  // The window that ends is reported whole.
  EXPECT_EQ(first["heartbeats"]["answered"], 1);
  EXPECT_EQ(first["heartbeats"]["failed"], 1);
  EXPECT_DOUBLE_EQ(first["heartbeats"]["latency_ms"]["max"].get<double>(), 40);
  EXPECT_GE(first["window_s"].get<double>(), 0.3);

  const json second = stats.Json(/*reset=*/false);
  EXPECT_EQ(second["heartbeats"]["answered"], 0);
  EXPECT_EQ(second["heartbeats"]["failed"], 0);
  EXPECT_DOUBLE_EQ(second["heartbeats"]["latency_ms"]["max"].get<double>(), 0);
  EXPECT_LT(second["window_s"].get<double>(), first["window_s"].get<double>());

  stats.Answered(absl::Milliseconds(7));
  const json third = stats.Json(/*reset=*/false);
  EXPECT_EQ(third["heartbeats"]["answered"], 1);
  EXPECT_DOUBLE_EQ(third["heartbeats"]["latency_ms"]["p50"].get<double>(), 7);
}

}  // namespace
}  // namespace loom
