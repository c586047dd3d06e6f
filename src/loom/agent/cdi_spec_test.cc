// CDI specs (cdi_spec.h): a spec as nvidia-ctk writes it, in YAML and in
// JSON; malformed ones refused whole with the file and the field named; the
// spec directories read in order, other kinds and other files left alone.

#include "loom/agent/cdi_spec.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using agent_testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// The shape of `nvidia-ctk cdi generate`'s output (toolkit 1.17), cut down
// to two GPUs.
constexpr char kNvidiaCtkYaml[] = R"(---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/dri/card1
      hostPath: /dev/dri/card1
- name: GPU-0c6f3a0e-2b7d-4b4c-9d52-1f0f6a1e2a10
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: "1"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia3
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/nvidia3
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
  - path: /dev/nvidia-uvm
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args: [nvidia-cdi-hook, create-symlinks, --link, libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so]
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args: [nvidia-cdi-hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05
    options: [ro, nosuid, nodev, bind]
  - hostPath: /run/nvidia-persistenced/socket
    containerPath: /run/nvidia-persistenced/socket
    options: [rw, nosuid, nodev, bind, noexec]
)";

constexpr char kSpecJson[] = R"({
  "cdiVersion": "0.6.0",
  "kind": "nvidia.com/gpu",
  "devices": [
    {"name": "GPU-1111", "containerEdits": {"deviceNodes": [
      {"path": "/dev/nvidia1", "hostPath": "/srv/dev/nvidia1",
       "type": "c", "major": 195, "minor": 1}]}}
  ],
  "containerEdits": {"env": ["A=1"], "mounts": [
    {"hostPath": "/opt/drv/libnvidia-ml.so.1",
     "containerPath": "/usr/lib64/libnvidia-ml.so.1", "type": "bind"}]}
})";

TEST(CdiSpecTest, ReadsNvidiaCtksYaml) {
  absl::StatusOr<CdiSpec> spec =
      ParseCdiSpec(kNvidiaCtkYaml, "/etc/cdi/nvidia.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->file, "/etc/cdi/nvidia.yaml");
  EXPECT_EQ(spec->version, "0.5.0");
  EXPECT_EQ(spec->kind, "nvidia.com/gpu");
  ASSERT_THAT(spec->devices, SizeIs(4));
  EXPECT_EQ(spec->devices[0].name, "0");
  EXPECT_EQ(spec->devices[1].name, "GPU-0c6f3a0e-2b7d-4b4c-9d52-1f0f6a1e2a10");
  EXPECT_EQ(spec->devices[3].name, "all");
  const CdiEdits& gpu0 = spec->devices[0].edits;
  ASSERT_THAT(gpu0.device_nodes, SizeIs(2));
  // hostPath defaults to path.
  EXPECT_EQ(gpu0.device_nodes[0].path, "/dev/nvidia0");
  EXPECT_EQ(gpu0.device_nodes[0].host_path, "/dev/nvidia0");
  EXPECT_EQ(gpu0.device_nodes[1].host_path, "/dev/dri/card1");
  EXPECT_EQ(spec->devices[2].edits.device_nodes[0].path, "/dev/nvidia3");

  const CdiEdits& common = spec->edits;
  EXPECT_THAT(common.env, ElementsAre("NVIDIA_VISIBLE_DEVICES=void"));
  ASSERT_THAT(common.device_nodes, SizeIs(2));
  EXPECT_EQ(common.device_nodes[0].path, "/dev/nvidiactl");
  EXPECT_EQ(common.hooks, 2);
  ASSERT_THAT(common.mounts, SizeIs(2));
  EXPECT_EQ(common.mounts[0].host_path,
            "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05");
  EXPECT_EQ(common.mounts[0].container_path,
            "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05");
  EXPECT_THAT(common.mounts[0].options,
              ElementsAre("ro", "nosuid", "nodev", "bind"));
  EXPECT_TRUE(common.mounts[0].readonly());
  EXPECT_FALSE(common.mounts[1].readonly());  // "rw"
}

TEST(CdiSpecTest, ReadsJson) {
  absl::StatusOr<CdiSpec> spec = ParseCdiSpec(kSpecJson, "/x/vendor.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->version, "0.6.0");
  ASSERT_THAT(spec->devices, SizeIs(1));
  EXPECT_EQ(spec->devices[0].name, "GPU-1111");
  ASSERT_THAT(spec->devices[0].edits.device_nodes, SizeIs(1));
  EXPECT_EQ(spec->devices[0].edits.device_nodes[0].path, "/dev/nvidia1");
  EXPECT_EQ(spec->devices[0].edits.device_nodes[0].host_path,
            "/srv/dev/nvidia1");
  EXPECT_THAT(spec->edits.env, ElementsAre("A=1"));
  ASSERT_THAT(spec->edits.mounts, SizeIs(1));
  EXPECT_EQ(spec->edits.mounts[0].type, "bind");
  EXPECT_TRUE(spec->edits.mounts[0].readonly());  // no options: read-only
  EXPECT_EQ(spec->edits.hooks, 0);
  // The same text read as YAML (JSON is YAML) gives the same spec.
  absl::StatusOr<CdiSpec> as_yaml = ParseCdiSpec(kSpecJson, "/x/v.yaml");
  ASSERT_TRUE(as_yaml.ok()) << as_yaml.status();
  EXPECT_EQ(as_yaml->devices[0].edits.device_nodes[0].host_path,
            "/srv/dev/nvidia1");
}

TEST(CdiSpecTest, AMalformedSpecIsRefusedNamingFileAndField) {
  const std::pair<std::string, std::string> cases[] = {
      {"kind: nvidia.com/gpu\ndevices: []\n", "cdiVersion: required"},
      {"cdiVersion: 0.5.0\nkind: gpu\ndevices: []\n", "kind: must be"},
      {"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n", "devices: required"},
      {"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: {a: 1}\n",
       "devices: must be a list"},
      {"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- containerEdits: "
       "{}\n",
       "devices[0].name: required"},
      {"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n"
       "  containerEdits:\n    mounts:\n    - hostPath: lib/libcuda.so.1\n"
       "      containerPath: /usr/lib/libcuda.so.1\n",
       "devices[0].containerEdits.mounts[0].hostPath: must be an absolute "
       "path"},
      {"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n"
       "containerEdits:\n  mounts:\n  - hostPath: /a\n",
       "containerEdits.mounts[0].containerPath: required"},
      {"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n"
       "containerEdits:\n  deviceNodes:\n  - path: /dev/../etc/shadow\n",
       "containerEdits.deviceNodes[0].path: must be an absolute path"},
      {"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n"
       "containerEdits:\n  env: [NOEQUALS]\n",
       "containerEdits.env[0]: must be NAME=value"},
      {"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n"
       "containerEdits:\n  mounts:\n  - {hostPath: /a, containerPath: /b, "
       "options: [[ro]]}\n",
       "containerEdits.mounts[0].options[0]: must be a string"},
      {"cdiVersion: [0]\nkind: nvidia.com/gpu\ndevices: []\n",
       "cdiVersion: must be a string"},
      {"- just\n- a list\n", "not a map"},
      {"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: [\n",
       "not valid "
       "YAML"},
  };
  for (const auto& [text, want] : cases) {
    absl::StatusOr<CdiSpec> spec = ParseCdiSpec(text, "/etc/cdi/bad.yaml");
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(spec.status().message()),
                HasSubstr("/etc/cdi/bad.yaml: "))
        << text;
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(want)) << text;
  }
  absl::StatusOr<CdiSpec> json = ParseCdiSpec("{\"cdiVersion\": ", "/a.json");
  ASSERT_FALSE(json.ok());
  EXPECT_THAT(std::string(json.status().message()),
              HasSubstr("/a.json: not valid JSON"));
  // Nesting no spec has is refused, not followed down the stack.
  std::string deep = "cdiVersion: 0.5.0\nkind: a.b/c\ndevices: []\nx: ";
  for (int i = 0; i < 200; ++i) deep += "[";
  for (int i = 0; i < 200; ++i) deep += "]";
  EXPECT_FALSE(ParseCdiSpec(deep, "/deep.yaml").ok());
}

void WriteSpecFile(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(CdiSpecTest, ReadsTheDirectoriesInOrderAndSkipsBadFiles) {
  TempDir tmp;
  const std::string etc = tmp.path() + "/etc-cdi";
  const std::string run = tmp.path() + "/run-cdi";
  WriteSpecFile(etc + "/b-nvidia.yaml", kNvidiaCtkYaml);
  WriteSpecFile(etc + "/a-vendor.json", kSpecJson);
  // Another vendor's kind: skipped without a word.
  WriteSpecFile(etc + "/c-other.yaml",
                "cdiVersion: 0.5.0\nkind: vendor.com/fpga\ndevices: []\n");
  // Not a spec's name: not read at all, though it would not parse.
  WriteSpecFile(etc + "/README.txt", "{{{");
  WriteSpecFile(run + "/broken.yaml",
                "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
                "- name: \"0\"\n  containerEdits:\n    deviceNodes:\n"
                "    - hostPath: /dev/nvidia0\n");
  WriteSpecFile(run + "/later.yml",
                "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
                "- name: \"0\"\n");
  std::vector<std::string> warnings;
  const std::vector<CdiSpec> specs = ReadCdiSpecs(
      {etc, tmp.path() + "/missing", run}, "nvidia.com/gpu", &warnings);
  ASSERT_THAT(specs, SizeIs(3));
  EXPECT_EQ(specs[0].file, etc + "/a-vendor.json");
  EXPECT_EQ(specs[1].file, etc + "/b-nvidia.yaml");
  EXPECT_EQ(specs[2].file, run + "/later.yml");
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr(run + "/broken.yaml"));
  EXPECT_THAT(warnings[0],
              HasSubstr("devices[0].containerEdits.deviceNodes[0].path: "
                        "required"));
  EXPECT_THAT(warnings[0], HasSubstr("skipped"));

  warnings.clear();
  EXPECT_THAT(ReadCdiSpecs({tmp.path() + "/none"}, "nvidia.com/gpu", &warnings),
              IsEmpty());
  EXPECT_THAT(warnings, IsEmpty());
}

}  // namespace
}  // namespace loom
