#include "loom/client/server_config.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A fake environment and a scratch HOME with an optional config file.
class DiscoverServersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/loom-config-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    home_ = tmpl;
    env_["HOME"] = home_;
  }
  void TearDown() override { std::filesystem::remove_all(home_); }

  GetEnvFn Env() {
    return [this](const char* name) -> std::optional<std::string> {
      auto it = env_.find(name);
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
  }

  // Writes `text` to `path` (creating its folders) and returns `path`.
  std::string Write(const std::string& path, const std::string& text) {
    std::filesystem::create_directories(
        std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
    return path;
  }
  std::string DefaultConfig() { return home_ + "/.config/loom/config.yaml"; }

  std::string home_;
  std::map<std::string, std::string> env_;
};

TEST_F(DiscoverServersTest, FlagWinsOverEverything) {
  env_["LOOM_SERVER"] = "http://env:1";
  Write(DefaultConfig(), "server: http://file:1\n");
  absl::StatusOr<ServerList> s =
      DiscoverServers("a:7000, http://b:7000/", Env());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(s->urls, ElementsAre("http://a:7000", "http://b:7000"));
  EXPECT_EQ(s->source, "--server");
}

TEST_F(DiscoverServersTest, EnvironmentBeforeConfigFile) {
  env_["LOOM_SERVER"] = "http://env:1";
  Write(DefaultConfig(), "server: http://file:1\n");
  absl::StatusOr<ServerList> s = DiscoverServers("", Env());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(s->urls, ElementsAre("http://env:1"));
  EXPECT_EQ(s->source, "LOOM_SERVER");
}

TEST_F(DiscoverServersTest, EmptyEnvironmentIsUnset) {
  env_["LOOM_SERVER"] = "";
  Write(DefaultConfig(), "server: http://file:1\n");
  absl::StatusOr<ServerList> s = DiscoverServers("", Env());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(s->urls, ElementsAre("http://file:1"));
  EXPECT_EQ(s->source, DefaultConfig());
}

TEST_F(DiscoverServersTest, LoomConfigBeforeDefaultFile) {
  Write(DefaultConfig(), "server: http://file:1\n");
  env_["LOOM_CONFIG"] = Write(home_ + "/other.yaml",
                              "# comment\nuser: bob\nserver:\n"
                              "  - http://x:1\n  - y:2\n");
  absl::StatusOr<ServerList> s = DiscoverServers("", Env());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(s->urls, ElementsAre("http://x:1", "http://y:2"));
}

TEST_F(DiscoverServersTest, MissingLoomConfigIsAnError) {
  env_["LOOM_CONFIG"] = home_ + "/nope.yaml";
  absl::StatusOr<ServerList> s = DiscoverServers("", Env());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("nope.yaml"));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("LOOM_CONFIG"));
}

TEST_F(DiscoverServersTest, NothingGivenExplainsTheThreeWays) {
  absl::StatusOr<ServerList> s = DiscoverServers("", Env());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string m(s.status().message());
  EXPECT_THAT(m, HasSubstr("--server"));
  EXPECT_THAT(m, HasSubstr("LOOM_SERVER"));
  EXPECT_THAT(m, HasSubstr("~/.config/loom/config.yaml"));
}

TEST_F(DiscoverServersTest, ConfigWithoutServerSaysSo) {
  Write(DefaultConfig(), "user: bob\n");
  absl::StatusOr<ServerList> s = DiscoverServers("", Env());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("has no `server:` setting"));
}

TEST_F(DiscoverServersTest, BadUrlsNameTheirSource) {
  absl::StatusOr<ServerList> s = DiscoverServers("ftp://x", Env());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("--server: "));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("ftp"));

  env_["LOOM_SERVER"] = ",,";
  s = DiscoverServers("", Env());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("LOOM_SERVER: no server URL given"));

  env_.erase("LOOM_SERVER");
  Write(DefaultConfig(), "\nserver: http://h:1/api\n");
  s = DiscoverServers("", Env());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("config.yaml:2:9: server: "));
}

TEST(ParseConfigServers, YamlErrorsHaveALocation) {
  absl::StatusOr<std::vector<std::string>> urls =
      ParseConfigServers("server: [a:1\n", "c.yaml");
  ASSERT_FALSE(urls.ok());
  EXPECT_THAT(std::string(urls.status().message()), HasSubstr("c.yaml:"));

  urls = ParseConfigServers("- a\n- b\n", "c.yaml");
  ASSERT_FALSE(urls.ok());
  EXPECT_THAT(std::string(urls.status().message()), HasSubstr("map"));

  urls = ParseConfigServers("server: {a: 1}\n", "c.yaml");
  ASSERT_FALSE(urls.ok());

  urls = ParseConfigServers("", "c.yaml");
  ASSERT_TRUE(urls.ok());
  EXPECT_TRUE(urls->empty());
}

}  // namespace
}  // namespace loom
