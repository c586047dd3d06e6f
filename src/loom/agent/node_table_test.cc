// The nodes an agent serves (node_table.h): names, their directories and
// inventory, and finding a node by name or by task, without an agent.

#include "loom/agent/node_table.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_node.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/fake_task_launcher.h"
#include "loom/agent/gpu_probe.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using agent_testing::CapturedLog;
using agent_testing::FakeNodes;
using agent_testing::kGi;
using agent_testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(NodeTableTest, ValidNodeNames) {
  for (const char* good : {"h200-0", "a", "7", "A.b_c-1", "node.example.com"}) {
    EXPECT_TRUE(ValidNodeName(good)) << good;
  }
  for (const char* bad :
       {"", "-a", ".a", "_a", "a/b", "a b", "a:b", "..", "h200-0\n", "é"}) {
    EXPECT_FALSE(ValidNodeName(bad)) << bad;
  }
  EXPECT_TRUE(ValidNodeName(std::string(253, 'a')));
  EXPECT_FALSE(ValidNodeName(std::string(254, 'a')));
}

TEST(NodeTableTest, OneNodeLivesInTheDataDir) {
  TempDir dir;
  CapturedLog log;
  std::unique_ptr<NodeTable> nodes =
      FakeNodes(dir.path(), {"h200-0"}, log.log());
  ASSERT_NE(nodes, nullptr);
  ASSERT_EQ(nodes->size(), 1u);
  const AgentNode& n = *nodes->nodes()[0];
  EXPECT_EQ(n.index, 0u);
  EXPECT_EQ(n.name, "h200-0");
  EXPECT_EQ(n.root, dir.path());
  EXPECT_EQ(n.tasks_dir, dir.path() + "/tasks");
  EXPECT_EQ(n.logs_dir, dir.path() + "/logs");
  EXPECT_EQ(n.units_dir, "");  // fake tasks: nothing to persist
  EXPECT_FALSE(fs::exists(dir.path() + "/units"));
  EXPECT_FALSE(fs::exists(dir.path() + "/nodes"));
  EXPECT_EQ(ModeOf(dir.path()), 0711u);
  EXPECT_EQ(ModeOf(n.tasks_dir), 0700u);
  EXPECT_EQ(ModeOf(n.logs_dir), 0700u);
  // Emulated: its GPUs and the emulation's node size.
  EXPECT_TRUE(n.emulated);
  EXPECT_EQ(n.gpus.size(), 8u);
  EXPECT_EQ(n.host.hostname, "test-host");
  EXPECT_EQ(n.host.cpus, 192);
  EXPECT_EQ(n.host.memory_bytes, 2048 * kGi);
  ASSERT_NE(n.launcher, nullptr);
  EXPECT_EQ(LeasePath(n), dir.path() + "/lease");
  EXPECT_EQ(TaskLogPath(n, "7.0.0", 0, false), dir.path() + "/logs/7.0.0.out");
  EXPECT_EQ(TaskLogPath(n, "7.0.0", 2, true),
            dir.path() + "/logs/7.0.0.p2.err");
}

TEST(NodeTableTest, AFleetLivesUnderNodes) {
  TempDir dir;
  CapturedLog log;
  std::map<std::string, std::string> launcher_dirs;
  NodeTableOptions options;
  options.data_dir = dir.path();
  options.fleet = true;
  options.emulation = ParseGpuEmulation("2xH200").value();
  options.use_cgroups = false;
  options.launcher_factory = [&](const std::string& node,
                                 const std::string& state_dir)
      -> absl::StatusOr<std::unique_ptr<TaskLauncher>> {
    launcher_dirs[node] = state_dir;
    return std::make_unique<FakeTaskLauncher>();
  };
  absl::StatusOr<std::unique_ptr<NodeTable>> nodes = NodeTable::Create(
      options, {"f-0", "f-1", "f-2"}, HostInfo{"h", 4, kGi}, {}, log.log());
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ((*nodes)->names(), (std::vector<std::string>{"f-0", "f-1", "f-2"}));
  EXPECT_EQ(ModeOf(dir.path() + "/nodes"), 0711u);
  std::set<std::string> uuids;
  for (const auto& n : (*nodes)->nodes()) {
    const std::string root = dir.path() + "/nodes/" + n->name;
    EXPECT_EQ(n->root, root);
    EXPECT_EQ(ModeOf(root), 0711u);
    for (const char* sub : {"/tasks", "/logs", "/units"}) {
      EXPECT_EQ(ModeOf(root + sub), 0700u) << root << sub;
    }
    EXPECT_EQ(n->units_dir, root + "/units");
    EXPECT_EQ(launcher_dirs[n->name], root + "/tasks");
    ASSERT_EQ(n->gpus.size(), 2u);
    uuids.insert(n->gpus[0].uuid);
    // An emulated H200 node has the emulation's size, not the host's.
    EXPECT_EQ(n->host.cpus, 192);
  }
  EXPECT_EQ(uuids.size(), 3u);  // each node its own GPUs
  EXPECT_EQ((*nodes)->nodes()[2]->index, 2u);
}

TEST(NodeTableTest, RealGpusAndErrorsThatNameTheNode) {
  TempDir dir;
  CapturedLog log;
  NodeTableOptions options;
  options.data_dir = dir.path();
  options.use_cgroups = false;
  options.launcher_factory =
      [](const std::string& node,
         const std::string&) -> absl::StatusOr<std::unique_ptr<TaskLauncher>> {
    if (node == "bad") return absl::InternalError("no launcher for you");
    return std::make_unique<FakeTaskLauncher>();
  };
  GpuDevice gpu;
  gpu.index = 0;
  gpu.uuid = "GPU-real";
  absl::StatusOr<std::unique_ptr<NodeTable>> nodes = NodeTable::Create(
      options, {"n-0"}, HostInfo{"h", 4, kGi}, {gpu}, log.log());
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  const AgentNode& n = *(*nodes)->nodes()[0];
  EXPECT_FALSE(n.emulated);
  ASSERT_EQ(n.gpus.size(), 1u);
  EXPECT_EQ(n.gpus[0].uuid, "GPU-real");
  EXPECT_EQ(n.host.cpus, 4);

  nodes = NodeTable::Create(options, {"bad"}, HostInfo{}, {}, log.log());
  EXPECT_TRUE(absl::IsInternal(nodes.status())) << nodes.status();
  EXPECT_THAT(Message(nodes.status()), HasSubstr("no launcher for you"));

  // A data dir that cannot be one.
  const std::string file = dir.path() + "/file";
  std::ofstream(file) << "x";
  options.data_dir = file;
  options.fleet = true;
  nodes = NodeTable::Create(options, {"f-0", "f-1"}, HostInfo{}, {}, log.log());
  ASSERT_FALSE(nodes.ok());
  EXPECT_THAT(Message(nodes.status()), ::testing::StartsWith("node f-0: "));
}

TEST(NodeTableTest, ResolveAndSelect) {
  TempDir one_dir;
  TempDir fleet_dir;
  CapturedLog log;
  std::unique_ptr<NodeTable> one =
      FakeNodes(one_dir.path(), {"h200-0"}, log.log());
  std::unique_ptr<NodeTable> fleet =
      FakeNodes(fleet_dir.path(), {"a-0", "a-1", "a-2"}, log.log());
  ASSERT_NE(one, nullptr);
  ASSERT_NE(fleet, nullptr);

  // "" names the only node of a one-node agent.
  absl::StatusOr<AgentNode*> n = one->Resolve("");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ((*n)->name, "h200-0");
  n = one->Resolve("h200-0");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, one->nodes()[0].get());
  // ... and no node of a fleet.
  n = fleet->Resolve("");
  EXPECT_TRUE(absl::IsInvalidArgument(n.status())) << n.status();
  EXPECT_THAT(Message(n.status()), HasSubstr("serves 3 emulated nodes"));
  n = fleet->Resolve("a-1");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ((*n)->index, 1u);
  // An unknown name: the nodes it might have meant.
  n = fleet->Resolve("a-9");
  EXPECT_TRUE(absl::IsNotFound(n.status())) << n.status();
  EXPECT_EQ(Message(n.status()),
            "this agent does not serve node 'a-9' (it serves a-0, a-1, a-2)");
  EXPECT_TRUE(absl::IsNotFound(one->Resolve("a-0").status()));

  absl::StatusOr<std::vector<AgentNode*>> all = fleet->Select("");
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ((*all)[i], fleet->nodes()[i].get());
  absl::StatusOr<std::vector<AgentNode*>> just = fleet->Select("a-2");
  ASSERT_TRUE(just.ok()) << just.status();
  EXPECT_THAT(*just, ElementsAre(fleet->nodes()[2].get()));
  EXPECT_TRUE(absl::IsNotFound(fleet->Select("zz").status()));
  all = one->Select("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 1u);
}

TEST(NodeTableTest, ALargeFleetIsNamedByItsEnds) {
  TempDir dir;
  CapturedLog log;
  std::unique_ptr<NodeTable> fleet =
      FakeNodes(dir.path(), {"b-0", "b-1", "b-2", "b-3", "b-4"}, log.log());
  ASSERT_NE(fleet, nullptr);
  EXPECT_EQ(Message(fleet->Resolve("c-0").status()),
            "this agent does not serve node 'c-0' (it serves 5 nodes: b-0 .. "
            "b-4)");
}

TEST(NodeTableTest, ForTaskFindsTheNodeThatKnowsTheTask) {
  TempDir dir;
  CapturedLog log;
  std::unique_ptr<NodeTable> fleet =
      FakeNodes(dir.path(), {"a-0", "a-1", "a-2"}, log.log());
  ASSERT_NE(fleet, nullptr);
  AgentNode& a1 = *fleet->nodes()[1];
  AgentNode& a2 = *fleet->nodes()[2];
  {
    absl::MutexLock lock(&a2.mu);
    a2.units["5.0.0"].task_id = "5.0.0";
  }
  // A task that is forgotten but whose log stays.
  std::ofstream(TaskLogPath(a1, "6.0.0", 0, false)) << "done\n";

  absl::StatusOr<AgentNode*> n = fleet->ForTask("", "5.0.0");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, &a2);
  n = fleet->ForTask("", "6.0.0");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, &a1);
  n = fleet->ForTask("", "7.0.0");
  EXPECT_TRUE(absl::IsNotFound(n.status())) << n.status();
  EXPECT_EQ(Message(n.status()),
            "task 7.0.0 is not known on any node of this agent");
  // A named node is taken as named, whatever it knows.
  n = fleet->ForTask("a-0", "5.0.0");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ((*n)->name, "a-0");
  EXPECT_TRUE(absl::IsNotFound(fleet->ForTask("a-9", "5.0.0").status()));

  // One node: that one.
  TempDir one_dir;
  std::unique_ptr<NodeTable> one =
      FakeNodes(one_dir.path(), {"h200-0"}, log.log());
  ASSERT_NE(one, nullptr);
  n = one->ForTask("", "7.0.0");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ((*n)->name, "h200-0");
}

}  // namespace
}  // namespace loom
