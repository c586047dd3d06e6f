#include "loom/cli/run_spec.h"

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/core/job_spec.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

// --- `loom run` flags -> job spec ---

RunFlags Flags(int gpus, std::vector<std::string> command) {
  RunFlags f;
  f.gpus = gpus;
  f.command = std::move(command);
  return f;
}

TEST(BuildRunSpec, OneNodeOrLessSendsTheTotal) {
  absl::StatusOr<Json> spec = BuildRunSpec(Flags(8, {"python", "train.py"}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["name"], "python");
  EXPECT_EQ((*spec)["resources"]["gpus"], 8);
  EXPECT_FALSE((*spec)["resources"].contains("nodes"));
  EXPECT_EQ((*spec)["resources"]["processes_per_task"], 1);
  EXPECT_FALSE(spec->contains("tasks"));
  EXPECT_EQ((*spec)["command"], Json::array({"python", "train.py"}));
  EXPECT_EQ((*spec)["project"], "default");
  EXPECT_EQ((*spec)["resources"]["gpu_model"], "any");
  EXPECT_EQ((*spec)["hold"], false);
  EXPECT_FALSE(spec->contains("time_limit"));
}

TEST(BuildRunSpec, MigAndGpuMemoryAskForPartsOfGpus) {
  RunFlags f = Flags(0, {"python", "eval.py"});
  f.mig = "1G.18gb";
  absl::StatusOr<Json> spec = BuildRunSpec(f);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["resources"]["mig"], "1g.18gb");
  EXPECT_EQ((*spec)["tasks"], 1);
  EXPECT_FALSE((*spec)["resources"].contains("gpus"));
  f = Flags(3, {"serve"});
  f.gpu_memory = "20Gi";
  spec = BuildRunSpec(f);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["tasks"], 3);
  EXPECT_EQ((*spec)["resources"]["gpu_share"]["memory"], "20Gi");
  f.mig = "1g.18gb";
  EXPECT_THAT(std::string(BuildRunSpec(f).status().message()),
              HasSubstr("--mig and --gpu-memory exclude each other"));
  f.mig.reset();
  f.gpu_memory = "lots";
  EXPECT_THAT(std::string(BuildRunSpec(f).status().message()),
              HasSubstr("--gpu-memory: 'lots' is not a memory size"));
  f.gpu_memory = "20Gi";
  f.nodes = 2;
  EXPECT_THAT(std::string(BuildRunSpec(f).status().message()),
              HasSubstr("--nodes: not with --mig or --gpu-memory"));
}

// Issue 39, finding 11: `--mig ''` was taken for "no --mig" and blamed -g.
TEST(BuildRunSpec, AnEmptyMigOrGpuMemoryIsThatFlagsError) {
  RunFlags f = Flags(0, {"python", "eval.py"});
  f.mig = "";
  EXPECT_EQ(BuildRunSpec(f).status().message(),
            "--mig: must not be empty (give a MIG profile such as 1g.18gb)");
  f.mig.reset();
  f.gpu_memory = "";
  EXPECT_EQ(BuildRunSpec(f).status().message(),
            "--gpu-memory: must not be empty (give a memory size such as "
            "20Gi)");
  // One byte (the unit left out) is the spec's error, under the flag.
  f.gpu_memory = "1";
  EXPECT_THAT(std::string(BuildRunSpec(f).status().message()),
              HasSubstr("--gpu-memory: must be at least 1Gi"));
}

TEST(BuildRunSpec, AMountWithACommaIsRefused) {
  RunFlags f = Flags(1, {"true"});
  f.image = "registry.example.com/team/train:1";
  f.mounts = {"/data:/mnt,/x"};
  EXPECT_THAT(std::string(BuildRunSpec(f).status().message()),
              HasSubstr("destination '/mnt,/x' has a ','"));
}

TEST(BuildRunSpec, ConstraintsBecomeTheNodeSelector) {
  RunFlags f = Flags(1, {"true"});
  f.constraints = {"gpu.driver=550.54.15", "nvme", "rack=a=b"};
  absl::StatusOr<Json> spec = BuildRunSpec(f);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["node_selector"],
            Json({{"gpu.driver", "550.54.15"}, {"nvme", ""}, {"rack", "a=b"}}));
  EXPECT_FALSE(BuildRunSpec(Flags(1, {"true"}))->contains("node_selector"));
  for (const char* bad : {"", "=x", "bad key=1", "k="}) {
    f.constraints = {bad};
    absl::StatusOr<Json> refused = BuildRunSpec(f);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr("--constraint")) << bad;
  }
  f.constraints = {"k=1", "k=2"};
  EXPECT_THAT(BuildRunSpec(f).status().message(), HasSubstr("twice"));
}

TEST(BuildRunSpec, DependencyFlags) {
  RunFlags f = Flags(1, {"true"});
  EXPECT_FALSE(BuildRunSpec(f)->contains("dependency"));
  f.dependency = "AfterOK:12:13,singleton";
  f.kill_on_invalid_dep = true;
  absl::StatusOr<Json> spec = BuildRunSpec(f);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["dependency"], "afterok:12:13,singleton");
  EXPECT_EQ((*spec)["kill_on_invalid_dep"], true);
  f.dependency = "afterok:x";
  absl::StatusOr<Json> refused = BuildRunSpec(f);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "--dependency: 'afterok:x': job ids are numbers");
}

TEST(BuildRunSpec, NodesSpreadTheGpus) {
  RunFlags f = Flags(16, {"torchrun", "train.py"});
  f.nodes = 2;
  f.procs_per_node = 8;
  absl::StatusOr<Json> spec = BuildRunSpec(f);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["resources"]["gpus"], 16);
  EXPECT_EQ((*spec)["resources"]["nodes"], 2);
  EXPECT_EQ((*spec)["resources"]["processes_per_task"], 8);
}

TEST(BuildRunSpec, EnvFlags) {
  RunFlags f = Flags(1, {"a"});
  f.env = {"GLOO_SOCKET_IFNAME=lo", "EMPTY=", "EQ=a=b"};
  absl::StatusOr<Json> spec = BuildRunSpec(f);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["env"]["GLOO_SOCKET_IFNAME"], "lo");
  EXPECT_EQ((*spec)["env"]["EMPTY"], "");
  EXPECT_EQ((*spec)["env"]["EQ"], "a=b");
}

TEST(BuildRunSpec, ShapeAgainstTheNodeSizeIsLeftToTheServer) {
  // 12 GPUs do not fill whole 8-GPU nodes, but only the server knows the
  // cluster's node size: the client sends the total as it is.
  absl::StatusOr<Json> spec = BuildRunSpec(Flags(12, {"a"}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["resources"]["gpus"], 12);
  EXPECT_FALSE((*spec)["resources"].contains("nodes"));
}

TEST(BuildRunSpec, OptionalFields) {
  RunFlags f = Flags(2, {"/usr/bin/python3", "-c", "print(1)"});
  f.project = "search";
  f.gpu_model = "H200";
  f.name = "my-eval";
  f.time_limit = "1h30m";
  f.hold = true;
  absl::StatusOr<Json> spec = BuildRunSpec(f);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["name"], "my-eval");
  EXPECT_EQ((*spec)["project"], "search");
  EXPECT_EQ((*spec)["resources"]["gpu_model"], "h200");
  EXPECT_EQ((*spec)["hold"], true);
  ASSERT_TRUE(spec->contains("time_limit"));
  EXPECT_EQ((*spec)["time_limit"], "90m");
}

TEST(BuildRunSpec, ErrorsNameTheFlag) {
  auto error = [](const RunFlags& f) {
    absl::StatusOr<Json> spec = BuildRunSpec(f);
    EXPECT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(spec.status().message());
  };
  EXPECT_THAT(error(Flags(0, {"a"})), HasSubstr("-g"));
  EXPECT_THAT(error(Flags(2, {})), HasSubstr("no command"));
  RunFlags f = Flags(12, {"a"});
  f.nodes = 5;
  EXPECT_THAT(error(f), HasSubstr("--nodes 5"));
  f = Flags(2, {"a"});
  f.nodes = -1;
  EXPECT_THAT(error(f), HasSubstr("--nodes"));
  f = Flags(2, {"a"});
  f.procs_per_node = -2;
  EXPECT_THAT(error(f), HasSubstr("--procs-per-node"));
  f = Flags(2, {"a"});
  f.procs_per_node = 1000;
  EXPECT_THAT(error(f), ::testing::StartsWith("--procs-per-node: "));
  f = Flags(2, {"a"});
  f.env = {"NOEQUALS"};
  EXPECT_THAT(error(f), HasSubstr("'NOEQUALS' is not NAME=VALUE"));
  f.env = {"RANK=3"};
  EXPECT_THAT(error(f), ::testing::StartsWith("--env RANK: "));
  f.env = {"1X=3"};
  EXPECT_THAT(error(f), ::testing::StartsWith("--env 1X: "));
  f = Flags(2, {"a"});
  f.name = "Bad_Name";
  EXPECT_THAT(error(f), ::testing::StartsWith("--name: "));
  f = Flags(2, {"a"});
  f.time_limit = "soon";
  EXPECT_THAT(error(f), ::testing::StartsWith("--time-limit: "));
  f = Flags(2, {"a"});
  f.gpu_model = "v@100";
  EXPECT_THAT(error(f), ::testing::StartsWith("--gpu-model: "));
  f = Flags(2, {"a"});
  f.project = "Not A Project";
  EXPECT_THAT(error(f), ::testing::StartsWith("--project: "));
}

TEST(DefaultJobName, SanitisesTheBasename) {
  EXPECT_EQ(DefaultJobName({"python", "x.py"}), "python");
  EXPECT_EQ(DefaultJobName({"/usr/bin/python3"}), "python3");
  EXPECT_EQ(DefaultJobName({"./Run_All.sh"}), "run-all-sh");
  EXPECT_EQ(DefaultJobName({"123"}), "job-123");
  EXPECT_EQ(DefaultJobName({"__"}), "job");
  EXPECT_EQ(DefaultJobName({""}), "job");
  EXPECT_EQ(DefaultJobName({"dir/"}), "dir");
  EXPECT_EQ(DefaultJobName({std::string(100, 'a')}), std::string(63, 'a'));
}

// --- `loom run --wait` exit codes ---

TEST(WaitExitCode, MapsTheOutcome) {
  EXPECT_EQ(WaitExitCode({{"state", "succeeded"}, {"exit_code", 0}}), 0);
  EXPECT_EQ(WaitExitCode({{"state", "failed"}, {"exit_code", 3}}), 3);
  EXPECT_EQ(WaitExitCode({{"state", "failed"}, {"exit_code", 300}}), 255);
  EXPECT_EQ(WaitExitCode({{"state", "failed"}, {"signal", 9}}), 137);
  EXPECT_EQ(WaitExitCode({{"state", "cancelled"}, {"exit_code", -15}}), 143);
  EXPECT_EQ(WaitExitCode({{"state", "failed"}, {"exit_code", nullptr}}), 1);
  EXPECT_EQ(WaitExitCode({{"state", "failed"}, {"exit_code", 0}}), 1);
  EXPECT_EQ(WaitExitCode({{"state", "cancelled"}}), 1);
  // No code on the job: the first task (by index) that has one.
  const Json tasks = {{"state", "failed"},
                      {"exit_code", nullptr},
                      {"placement",
                       {{"tasks",
                         {{{"index", 1}, {"exit_code", 2}},
                          {{"index", 0}, {"exit_code", 0}, {"signal", 6}}}}}}};
  EXPECT_EQ(WaitExitCode(tasks), 134);
}

TEST(BuildRunSpec, ImageFlagsBuildTheContainer) {
  RunFlags f = Flags(8, {"python", "train.py"});
  f.image = "registry.example.com:5000/team/train:1.4";
  f.mounts = {"/data:/data:ro", "/scratch/alice/:/scratch"};
  f.container_workdir = "/w/";
  f.writable = true;
  f.shm_size = "16Gi";
  absl::StatusOr<Json> spec = BuildRunSpec(f);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["container"],
            Json::parse(R"({"image": "registry.example.com:5000/team/train:1.4",
                            "mounts": ["/data:/data:ro",
                                       "/scratch/alice:/scratch"],
                            "workdir": "/w", "writable": true,
                            "shm_size": "16Gi"})"));
  EXPECT_EQ((*spec)["command"], Json::array({"python", "train.py"}));
  // The server reads it as the same job.
  absl::StatusOr<JobSpec> back = ParseJobSpec(spec->dump(), "body");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->container.has_value());
  EXPECT_EQ(back->container->shm_size_bytes, int64_t{16} << 30);
  // Without --image: no container.
  EXPECT_FALSE(BuildRunSpec(Flags(1, {"x"}))->contains("container"));
}

TEST(BuildRunSpec, ImageFlagErrorsNameTheFlag) {
  auto error = [](const RunFlags& f) {
    absl::StatusOr<Json> spec = BuildRunSpec(f);
    EXPECT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(spec.status().message());
  };
  RunFlags f = Flags(1, {"x"});
  f.mounts = {"/data:/data"};
  EXPECT_EQ(error(f),
            "--mount: only applies with --image (the job runs in an image)");
  f = Flags(1, {"x"});
  f.writable = true;
  EXPECT_THAT(error(f), ::testing::StartsWith("--writable: only applies"));
  f = Flags(1, {"x"});
  f.image = "localhost:5000/a:1";
  f.mounts = {"/data:data"};
  EXPECT_EQ(error(f),
            "--mount /data:data: destination must be an absolute path, got "
            "'data'");
  f.mounts = {"/a:/d", "/b:/d:ro"};
  EXPECT_THAT(error(f), ::testing::StartsWith(
                            "--mount[1]: destination '/d' is already mounted"));
  f.mounts = {};
  f.container_workdir = "w";
  EXPECT_THAT(error(f), ::testing::StartsWith("--container-workdir: must be "
                                              "an absolute path"));
  f.container_workdir = "";
  f.shm_size = "lots";
  EXPECT_THAT(error(f), ::testing::StartsWith("--shm-size: "));
  f.shm_size = "";
  f.image = "a b";
  EXPECT_THAT(error(f), ::testing::StartsWith("--image: 'a b' is not an image "
                                              "reference"));
}

TEST(IsFinalJobState, Finals) {
  EXPECT_TRUE(IsFinalJobState("succeeded"));
  EXPECT_TRUE(IsFinalJobState("failed"));
  EXPECT_TRUE(IsFinalJobState("cancelled"));
  EXPECT_FALSE(IsFinalJobState("stopping"));
  EXPECT_FALSE(IsFinalJobState("held"));
}

}  // namespace
}  // namespace loom
