// The OCI config of a container task (oci_bundle.h): what runc is told.

#include "loom/agent/oci_bundle.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using json = nlohmann::json;

OciConfig Config() {
  OciConfig c;
  c.args = {"python3", "train.py"};
  c.env = {"RANK=1", "PATH=/usr/bin"};
  c.cwd = "/w";
  c.uid = 1000;
  c.gid = 1000;
  c.additional_gids = {27};
  c.rootfs = "/var/lib/loom/containers/1.0/rootfs";
  c.shm_bytes = 1 << 30;
  c.binds = {{"/data", "/data", true}, {"/ckpt/1", "/ckpt/1", false}};
  c.devices = {{"/dev/nvidia3", 'c', 195, 3, 0666}};
  c.cgroups_path = "/loom-tasks/k/1.0/container";
  c.memory_limit_bytes = 8LL << 30;
  c.cpu_millis = 1500;
  return c;
}

const json* MountAt(const json& config, const std::string& destination) {
  for (const json& m : config["mounts"]) {
    if (m["destination"] == destination) return &m;
  }
  return nullptr;
}

TEST(OciBundleTest, TheProcessRunsAsTheUserWithoutPrivileges) {
  const json c = json::parse(OciConfigJson(Config()));
  EXPECT_EQ(c["ociVersion"], "1.0.2");
  const json& p = c["process"];
  EXPECT_EQ(p["args"], json({"python3", "train.py"}));
  EXPECT_EQ(p["env"], json({"RANK=1", "PATH=/usr/bin"}));
  EXPECT_EQ(p["cwd"], "/w");
  EXPECT_EQ(p["user"]["uid"], 1000);
  EXPECT_EQ(p["user"]["gid"], 1000);
  EXPECT_EQ(p["user"]["additionalGids"], json({27}));
  EXPECT_EQ(p["terminal"], false);
  EXPECT_EQ(p["noNewPrivileges"], true);
  for (const char* set :
       {"bounding", "effective", "inheritable", "permitted", "ambient"}) {
    EXPECT_EQ(p["capabilities"][set], json::array()) << set;
  }
}

TEST(OciBundleTest, OnlyAMountNamespaceOfItsOwn) {
  const json c = json::parse(OciConfigJson(Config()));
  EXPECT_EQ(c["linux"]["namespaces"], json::parse(R"([{"type":"mount"}])"));
  EXPECT_FALSE(c.contains("hostname"));  // the host's UTS namespace
}

TEST(OciBundleTest, ReadOnlyRootStandardMountsBindsAndShm) {
  OciConfig config = Config();
  json c = json::parse(OciConfigJson(config));
  EXPECT_EQ(c["root"]["path"], config.rootfs);
  EXPECT_EQ(c["root"]["readonly"], true);
  for (const char* at : {"/proc", "/dev", "/dev/pts", "/dev/shm", "/sys"}) {
    EXPECT_NE(MountAt(c, at), nullptr) << at;
  }
  EXPECT_THAT(
      (*MountAt(c, "/dev/shm"))["options"].get<std::vector<std::string>>(),
      ::testing::Contains("size=1073741824"));
  EXPECT_THAT((*MountAt(c, "/sys"))["options"].get<std::vector<std::string>>(),
              ::testing::Contains("ro"));
  const json* data = MountAt(c, "/data");
  ASSERT_NE(data, nullptr);
  EXPECT_EQ((*data)["source"], "/data");
  EXPECT_EQ((*data)["type"], "bind");
  EXPECT_THAT((*data)["options"].get<std::vector<std::string>>(),
              ::testing::IsSupersetOf({"rbind", "ro", "nosuid", "nodev"}));
  EXPECT_THAT(
      (*MountAt(c, "/ckpt/1"))["options"].get<std::vector<std::string>>(),
      ::testing::Contains("rw"));

  config.readonly_root = false;
  config.shm_bytes = 0;
  c = json::parse(OciConfigJson(config));
  EXPECT_EQ(c["root"]["readonly"], false);
  for (const json& o : (*MountAt(c, "/dev/shm"))["options"]) {
    EXPECT_FALSE(o.get<std::string>().starts_with("size=")) << o;
  }
}

TEST(OciBundleTest, DevicesAreMadeAndTheRestDenied) {
  const json c = json::parse(OciConfigJson(Config()));
  ASSERT_EQ(c["linux"]["devices"].size(), 1u);
  EXPECT_EQ(c["linux"]["devices"][0]["path"], "/dev/nvidia3");
  EXPECT_EQ(c["linux"]["devices"][0]["major"], 195);
  EXPECT_EQ(c["linux"]["devices"][0]["minor"], 3);
  const json& rules = c["linux"]["resources"]["devices"];
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0], json::parse(R"({"allow":false,"access":"rwm"})"));
  EXPECT_EQ(rules[1]["allow"], true);
  EXPECT_EQ(rules[1]["minor"], 3);
}

TEST(OciBundleTest, TheTasksLimitsAndCgroup) {
  const json c = json::parse(OciConfigJson(Config()));
  EXPECT_EQ(c["linux"]["cgroupsPath"], "/loom-tasks/k/1.0/container");
  EXPECT_EQ(c["linux"]["resources"]["memory"]["limit"], 8LL << 30);
  EXPECT_EQ(c["linux"]["resources"]["cpu"]["period"], 100000);
  EXPECT_EQ(c["linux"]["resources"]["cpu"]["quota"], 150000);

  OciConfig none = Config();
  none.memory_limit_bytes = 0;
  none.cpu_millis = 0;
  const json n = json::parse(OciConfigJson(none));
  EXPECT_FALSE(n["linux"]["resources"].contains("memory"));
  EXPECT_FALSE(n["linux"]["resources"].contains("cpu"));
}

}  // namespace
}  // namespace loom
