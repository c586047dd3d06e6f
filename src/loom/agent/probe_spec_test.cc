// A service replica's launch fields (`port`, `readiness`, `liveness`,
// probe_spec.h, launch_request.h): defaults, every bad field named, and
// the unit file that keeps them across an agent restart (unit_file.h).

#include "loom/agent/probe_spec.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/launch_request.h"
#include "loom/agent/task_state.h"
#include "loom/agent/unit_file.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

json ReplicaBody() {
  return {{"task_id", "7.0.0"},
          {"job_id", 7},
          {"argv", {"python3", "serve.py"}},
          {"port", true},
          {"readiness",
           {{"http", "/healthz"},
            {"period_ms", 1000},
            {"timeout_ms", 500},
            {"failures", 2},
            {"initial_delay_ms", 0}}},
          {"liveness",
           {{"http", "/live?deep=1"},
            {"period_ms", 5000},
            {"timeout_ms", 2000},
            {"failures", 3},
            {"initial_delay_ms", 10000}}}};
}

TEST(ProbeSpecTest, ParsesAReplicasPortAndProbes) {
  std::string field;
  absl::StatusOr<LaunchRequest> r = ParseLaunchRequest(ReplicaBody(), &field);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->port);
  ASSERT_TRUE(r->readiness.has_value());
  EXPECT_EQ(r->readiness->http, "/healthz");
  EXPECT_EQ(r->readiness->period, absl::Seconds(1));
  EXPECT_EQ(r->readiness->timeout, absl::Milliseconds(500));
  EXPECT_EQ(r->readiness->failures, 2);
  EXPECT_EQ(r->readiness->initial_delay, absl::ZeroDuration());
  ASSERT_TRUE(r->liveness.has_value());
  EXPECT_EQ(r->liveness->http, "/live?deep=1");
  EXPECT_EQ(r->liveness->period, absl::Seconds(5));
  EXPECT_EQ(r->liveness->timeout, absl::Seconds(2));
  EXPECT_EQ(r->liveness->failures, 3);
  EXPECT_EQ(r->liveness->initial_delay, absl::Seconds(10));
}

TEST(ProbeSpecTest, DefaultsAndPlainTasks) {
  json body = ReplicaBody();
  body["readiness"] = {{"http", "/"}};
  body["liveness"] = {{"http", "/l"}, {"period_ms", 400}, {"extra", 1}};
  absl::StatusOr<LaunchRequest> r = ParseLaunchRequest(body);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->readiness->period, absl::Seconds(1));
  EXPECT_EQ(r->readiness->timeout, absl::Seconds(1));
  EXPECT_EQ(r->readiness->failures, 3);
  EXPECT_EQ(r->readiness->initial_delay, absl::ZeroDuration());
  // The timeout defaults to the period when that is shorter than 1 s.
  EXPECT_EQ(r->liveness->timeout, absl::Milliseconds(400));

  body = ReplicaBody();
  body.erase("readiness");
  body.erase("liveness");
  body["port"] = false;
  r = ParseLaunchRequest(body);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->port);
  EXPECT_FALSE(r->readiness.has_value());
  body.erase("port");
  body["readiness"] = nullptr;  // null: not given
  r = ParseLaunchRequest(body);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->port);
  EXPECT_FALSE(r->readiness.has_value());
}

TEST(ProbeSpecTest, EachBadFieldIsNamed) {
  struct Case {
    std::string name;
    json patch;  // merged into ReplicaBody()
    std::string field;
    std::string message;
  };
  const std::string long_path = "/" + std::string(1024, 'a');
  const std::vector<Case> cases = {
      {"port a number", {{"port", 1}}, "port", "must be true or false"},
      {"port a string", {{"port", "yes"}}, "port", "must be true or false"},
      {"probe without port",
       {{"port", false}},
       "readiness",
       "needs \"port\": true"},
      {"probe not an object",
       {{"liveness", "/healthz"}},
       "liveness",
       "must be an object"},
      {"no http",
       {{"readiness", {{"http", nullptr}}}},
       "readiness.http",
       "is required"},
      {"http not a string",
       {{"readiness", {{"http", 5}}}},
       "readiness.http",
       "must be a path"},
      {"http relative",
       {{"readiness", {{"http", "healthz"}}}},
       "readiness.http",
       "starting with '/'"},
      {"http with a space",
       {{"readiness", {{"http", "/a b"}}}},
       "readiness.http",
       "no spaces"},
      {"http with CRLF",
       {{"liveness", {{"http", "/a\r\nHost: x"}}}},
       "liveness.http",
       "must be a path"},
      {"http with a control",
       {{"readiness", {{"http", "/a\tb"}}}},
       "readiness.http",
       "must be a path"},
      {"http too long",
       {{"readiness", {{"http", long_path}}}},
       "readiness.http",
       "at most 1024"},
      {"period too short",
       {{"readiness", {{"http", "/"}, {"period_ms", 99}}}},
       "readiness.period_ms",
       "from 100 to 3600000"},
      {"period too long",
       {{"readiness", {{"http", "/"}, {"period_ms", 3600001}}}},
       "readiness.period_ms",
       "from 100 to 3600000"},
      {"period a float",
       {{"readiness", {{"http", "/"}, {"period_ms", 1000.5}}}},
       "readiness.period_ms",
       "whole number"},
      {"timeout over the period",
       {{"liveness", {{"http", "/"}, {"period_ms", 500}, {"timeout_ms", 501}}}},
       "liveness.timeout_ms",
       "from 1 to 500 (period_ms)"},
      {"timeout too short",
       {{"liveness", {{"http", "/"}, {"timeout_ms", 0}}}},
       "liveness.timeout_ms",
       "from 1 to 5000 (period_ms)"},
      {"no failures",
       {{"readiness", {{"http", "/"}, {"failures", 0}}}},
       "readiness.failures",
       "from 1 to 100"},
      {"too many failures",
       {{"readiness", {{"http", "/"}, {"failures", 101}}}},
       "readiness.failures",
       "from 1 to 100"},
      {"failures a string",
       {{"readiness", {{"http", "/"}, {"failures", "3"}}}},
       "readiness.failures",
       "whole number"},
      {"negative delay",
       {{"liveness", {{"http", "/"}, {"initial_delay_ms", -1}}}},
       "liveness.initial_delay_ms",
       "from 0 to 3600000"},
      {"delay too long",
       {{"liveness", {{"http", "/"}, {"initial_delay_ms", 3600001}}}},
       "liveness.initial_delay_ms",
       "from 0 to 3600000"},
  };
  for (const Case& c : cases) {
    json body = ReplicaBody();
    body.merge_patch(c.patch);
    std::string field;
    absl::StatusOr<LaunchRequest> r = ParseLaunchRequest(body, &field);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_EQ(field, c.field) << c.name << ": " << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.message))
        << c.name;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.field + ": "))
        << c.name;
  }
}

TEST(ProbeSpecTest, ProbesSurviveTheUnitFile) {
  absl::StatusOr<LaunchRequest> r = ParseLaunchRequest(ReplicaBody());
  ASSERT_TRUE(r.ok()) << r.status();
  TaskUnit u;
  u.task_id = "7.0.0";
  u.job_id = 7;
  u.port = 20017;
  u.readiness = r->readiness;
  u.liveness = r->liveness;
  u.started_at = absl::FromUnixMillis(1700000000123);
  TaskProcess p;
  p.launcher_id = "7.0.0";
  u.procs.push_back(p);
  absl::StatusOr<TaskUnit> back = ParseUnitFile(UnitFileText(u));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->port, 20017);
  EXPECT_EQ(back->started_at, u.started_at);
  ASSERT_TRUE(back->readiness.has_value());
  EXPECT_EQ(ProbeSpecJson(*back->readiness), ProbeSpecJson(*u.readiness));
  ASSERT_TRUE(back->liveness.has_value());
  EXPECT_EQ(ProbeSpecJson(*back->liveness), ProbeSpecJson(*u.liveness));

  // A plain task's file has none of it.
  u.port = 0;
  u.readiness.reset();
  u.liveness.reset();
  u.started_at = absl::InfinitePast();
  const json plain = json::parse(UnitFileText(u));
  EXPECT_FALSE(plain.contains("port"));
  EXPECT_FALSE(plain.contains("readiness"));
  back = ParseUnitFile(plain.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->port, 0);
  EXPECT_FALSE(back->liveness.has_value());

  // Bad ones are refused like any other bad unit file.
  for (const json& patch :
       {json{{"port", 0}}, json{{"port", 70000}}, json{{"port", "80"}},
        json{{"started_at_ms", "x"}},
        json{{"port", 20017}, {"readiness", {{"http", "x"}}}},
        json{{"liveness", {{"http", "/"}}}}}) {
    json bad = plain;
    bad.merge_patch(patch);
    EXPECT_FALSE(ParseUnitFile(bad.dump()).ok()) << patch.dump();
  }
}

}  // namespace
}  // namespace loom
