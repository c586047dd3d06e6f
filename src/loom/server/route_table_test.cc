#include "loom/server/route_table.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

TEST(RouteOf, TemplatesOfEveryRoute) {
  EXPECT_EQ(RouteOf("/"), "/");
  EXPECT_EQ(RouteOf("/metrics"), "/metrics");
  EXPECT_EQ(RouteOf("/healthz"), "/healthz");
  EXPECT_EQ(RouteOf("/v1/jobs"), "/v1/jobs");
  EXPECT_EQ(RouteOf("/v1/jobs?state=running"), "/v1/jobs");
  EXPECT_EQ(RouteOf("/v1/jobs/release"), "/v1/jobs/release");
  EXPECT_EQ(RouteOf("/v1/jobs/42"), "/v1/jobs/{id}");
  EXPECT_EQ(RouteOf("/v1/jobs/42/logs?task=1&follow=1"), "/v1/jobs/{id}/logs");
  EXPECT_EQ(RouteOf("/v1/jobs/42/checkpoint"), "/v1/jobs/{id}/checkpoint");
  EXPECT_EQ(RouteOf("/v1/nodes/h200-3/drain"), "/v1/nodes/{name}/drain");
  EXPECT_EQ(RouteOf("/v1/nodes/h200-3"), "/v1/nodes/{name}");
  EXPECT_EQ(RouteOf("/v1/agents/heartbeat"), "/v1/agents/heartbeat");
  EXPECT_EQ(RouteOf("/v1/chaos"), "/v1/chaos");
  // Anything else is one label value, whatever the path (no cardinality
  // explosion from garbage requests).
  EXPECT_EQ(RouteOf("/v1/jobs/42/explode"), "other");
  EXPECT_EQ(RouteOf("/etc/passwd"), "other");
  EXPECT_EQ(RouteOf("/v1/agents/evil"), "other");
}

TEST(FindRoute, CapturesAndCanonicalIds) {
  std::vector<std::string> captures;
  const RouteRule* r = FindRoute("GET", "/v1/jobs/42/logs?task=1", &captures);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->route, "/v1/jobs/{id}/logs");
  EXPECT_EQ(captures, std::vector<std::string>{"42"});
  r = FindRoute("POST", "/v1/nodes/h200%2D3/drain", &captures);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->access, Access::kOperator);
  EXPECT_EQ(captures, std::vector<std::string>{"h200-3"});
  // Literal routes win over placeholders.
  r = FindRoute("POST", "/v1/jobs/release");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->route, "/v1/jobs/release");
  for (const char* path : {"/v1/jobs/042", "/v1/jobs/-1", "/v1/jobs/0",
                           "/v1/jobs/99999999999999999999", "/v1/jobs/1/",
                           "/v1//jobs", "/v1/nodes/a%2Fb"}) {
    EXPECT_EQ(FindRoute("GET", path), nullptr) << path;
  }
  EXPECT_EQ(FindRoute("DELETE", "/v1/jobs"), nullptr);
}

TEST(AllowedMethods, OfAPathWithRoutes) {
  EXPECT_TRUE(PathHasRoute("/v1/jobs"));
  EXPECT_EQ(AllowedMethods("/v1/jobs"), "POST, GET");
  EXPECT_EQ(AllowedMethods("/v1/tokens?x=1"), "GET, POST");
  EXPECT_EQ(AllowedMethods("/v1/jobs/7/cancel"), "POST");
  EXPECT_FALSE(PathHasRoute("/v1/nope"));
  EXPECT_EQ(AllowedMethods("/v1/nope"), "");
}

}  // namespace
}  // namespace loom
