// The `container` object of a launch body (launch_request.h).

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/launch_request.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr char kImage[] =
    "127.0.0.1:5000/team/train@sha256:"
    "2590554b4e9cf0cbc7eca57767fb0b32b24173e634dd7936f6927f0d8a1bf8be";

TEST(ContainerRequestTest, ParsesEveryField) {
  absl::StatusOr<ContainerRequest> c = ParseContainerRequest(
      json{{"image", kImage},
           {"image_ref", "127.0.0.1:5000/team/train:1.4"},
           {"mounts",
            {{{"source", "/data"}, {"destination", "/d"}, {"readonly", true}},
             {{"source", "/scratch"}, {"destination", "/scratch"}}}},
           {"workdir", "/w"},
           {"entrypoint", {"/entry.sh"}},
           {"writable", true},
           {"shm_size", 1 << 30}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->image, kImage);
  EXPECT_EQ(c->image_ref, "127.0.0.1:5000/team/train:1.4");
  ASSERT_EQ(c->mounts.size(), 2u);
  EXPECT_EQ(c->mounts[0].source, "/data");
  EXPECT_EQ(c->mounts[0].destination, "/d");
  EXPECT_TRUE(c->mounts[0].readonly);
  EXPECT_FALSE(c->mounts[1].readonly);
  EXPECT_EQ(c->workdir, "/w");
  EXPECT_EQ(c->entrypoint, std::vector<std::string>{"/entry.sh"});
  EXPECT_TRUE(c->writable);
  EXPECT_EQ(c->shm_size_bytes, 1 << 30);
}

TEST(ContainerRequestTest, DefaultsAndTheLaunchBody) {
  absl::StatusOr<LaunchRequest> r =
      ParseLaunchRequest(json{{"task_id", "1.0"},
                              {"argv", {"true"}},
                              {"container", {{"image", kImage}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->container.has_value());
  EXPECT_EQ(r->container->image_ref, kImage);
  EXPECT_TRUE(r->container->mounts.empty());
  EXPECT_FALSE(r->container->writable);
  EXPECT_EQ(r->container->shm_size_bytes, 0);
  absl::StatusOr<LaunchRequest> plain =
      ParseLaunchRequest(json{{"task_id", "1.0"}, {"argv", {"true"}}});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->container.has_value());
}

TEST(ContainerRequestTest, BadFieldsAreNamed) {
  struct Case {
    json body;
    std::string field;
    std::string says;
  } cases[] = {
      {json::array(), "container", "must be an object"},
      {json::object(), "container.image", "is required"},
      {{{"image", 5}}, "container.image", "must be a string"},
      {{{"image", kImage}, {"workdir", "w"}}, "container.workdir", "absolute"},
      {{{"image", kImage},
        {"mounts", {{{"source", "data"}, {"destination", "/d"}}}}},
       "container.mounts[0].source",
       "absolute"},
      {{{"image", kImage},
        {"mounts", {{{"source", "/data"}, {"destination", "/"}}}}},
       "container.mounts[0].destination",
       "root"},
      {{{"image", kImage},
        {"mounts",
         {{{"source", "/a"}, {"destination", "/d"}},
          {{"source", "/b"}, {"destination", "/d"}}}}},
       "container.mounts[1].destination",
       "twice"},
      {{{"image", kImage},
        {"mounts",
         {{{"source", "/a"}, {"destination", "/d"}, {"readonly", "yes"}}}}},
       "container.mounts[0].readonly",
       "true or false"},
      {{{"image", kImage}, {"writable", 1}},
       "container.writable",
       "true or false"},
      {{{"image", kImage}, {"shm_size", -1}}, "container.shm_size", "bytes"},
      {{{"image", kImage}, {"entrypoint", "sh"}},
       "container.entrypoint",
       "list"},
  };
  for (const Case& c : cases) {
    std::string field;
    absl::StatusOr<ContainerRequest> r = ParseContainerRequest(c.body, &field);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(field, c.field) << c.body;
    EXPECT_THAT(r.status().message(), HasSubstr(c.says)) << c.body;
  }
}

}  // namespace
}  // namespace loom
