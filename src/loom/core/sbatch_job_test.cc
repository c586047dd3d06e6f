// Tests of the `loom _batch` invocation (its argv and parsing it back) and
// of turning sbatch options into a loom job spec (sbatch_job.h).

#include "loom/core/sbatch_job.h"

#include <csignal>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/core/cluster_spec.h"
#include "loom/core/job_array.h"
#include "loom/core/job_dependency.h"
#include "loom/core/job_spec.h"
#include "loom/core/sbatch_script.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::StartsWith;
using ::testing::UnorderedElementsAre;

using Argv = std::vector<std::string>;

// ---------------------------------------------------------------------------
// BatchInvocationArgv / ParseBatchInvocation

BatchInvocation SbJobFullInvocation() {
  BatchInvocation b;
  b.ntasks = 4;
  b.ntasks_per_node = 2;
  b.cpus_per_task = 8;
  b.gpus_per_node = 8;
  b.job_name = "train";
  b.submit_dir = "/home/ada/exp";
  b.submit_host = "login1";
  b.account = "vision";
  b.partition = "h200";
  b.output = "out-%j.log";
  b.error = "err-%j.log";
  b.script = "#!/bin/bash\nsrun python train.py\n";
  b.args = {"--lr", "0.1"};
  return b;
}

std::string SbJobParseError(const Argv& argv) {
  absl::StatusOr<BatchInvocation> b = ParseBatchInvocation(argv);
  EXPECT_FALSE(b.ok()) << testing::PrintToString(argv);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(b.status().message());
}

void SbJobExpectRoundTrip(const BatchInvocation& b) {
  absl::StatusOr<BatchInvocation> back =
      ParseBatchInvocation(BatchInvocationArgv(b));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, b);
}

TEST(BatchInvocationArgv, EveryFieldInOrder) {
  EXPECT_THAT(
      BatchInvocationArgv(SbJobFullInvocation()),
      ElementsAre("loom", "_batch", "--ntasks=4", "--ntasks-per-node=2",
                  "--cpus-per-task=8", "--gpus-per-node=8", "--job-name=train",
                  "--submit-dir=/home/ada/exp", "--submit-host=login1",
                  "--account=vision", "--partition=h200", "--output=out-%j.log",
                  "--error=err-%j.log", "--script",
                  "#!/bin/bash\nsrun python train.py\n", "--", "--lr", "0.1"));
}

TEST(BatchInvocationArgv, OptionalFieldsOnlyWhenSet) {
  BatchInvocation b;
  b.job_name = "j";
  b.submit_dir = "/d";
  b.submit_host = "h";
  b.account = "default";
  b.output = "slurm-%j.out";
  b.script = "#!/bin/sh\n";
  EXPECT_THAT(
      BatchInvocationArgv(b),
      ElementsAre("loom", "_batch", "--ntasks=1", "--job-name=j",
                  "--submit-dir=/d", "--submit-host=h", "--account=default",
                  "--output=slurm-%j.out", "--script", "#!/bin/sh\n", "--"));
}

TEST(BatchInvocationArgv, RequiredStringsAreWrittenEvenWhenEmpty) {
  BatchInvocation b;
  EXPECT_THAT(BatchInvocationArgv(b),
              ElementsAre("loom", "_batch", "--ntasks=1",
                          "--job-name=", "--submit-dir=", "--submit-host=",
                          "--account=", "--output=", "--script", "", "--"));
  SbJobExpectRoundTrip(b);
}

TEST(ParseBatchInvocation, RoundTripOfEveryField) {
  SbJobExpectRoundTrip(SbJobFullInvocation());
}

TEST(ParseBatchInvocation, RoundTripOfAwkwardValues) {
  BatchInvocation b = SbJobFullInvocation();
  b.job_name = "a=b=c";
  b.submit_dir = "/home/ada/my dir/x=1";
  b.submit_host = "host with spaces";
  b.account = "=";
  b.partition = "p\nq";
  b.output = "out put=%j\n.log";
  b.error = " ";
  b.script = "#!/bin/bash\n# --ntasks=9\necho \"a=b\" 'c d'\n\n--\n";
  b.args = {"",         "two words", "x=y", "line1\nline2", "--", "--ntasks=3",
            "--script", "-",         "",    "é ü 日本"};
  SbJobExpectRoundTrip(b);
}

TEST(ParseBatchInvocation, RoundTripOfScriptsThatLookLikeFlags) {
  for (const std::string& script :
       {std::string("--"), std::string("--ntasks=2"), std::string(""),
        std::string("--script")}) {
    BatchInvocation b;
    b.script = script;
    b.args = {"--"};
    SbJobExpectRoundTrip(b);
  }
}

TEST(ParseBatchInvocation, RoundTripOfLargeNumbersAndNoArgs) {
  BatchInvocation b;
  b.ntasks = 2147483647;
  b.ntasks_per_node = 1;
  b.cpus_per_task = 1000000;
  b.gpus_per_node = 16;
  b.script = "#!/bin/sh\n";
  SbJobExpectRoundTrip(b);
}

TEST(ParseBatchInvocation, FirstTwoElementsAreSkipped) {
  absl::StatusOr<BatchInvocation> b = ParseBatchInvocation(
      {"/usr/bin/loom", "whatever", "--script", "S", "--", "a"});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->script, "S");
  EXPECT_THAT(b->args, ElementsAre("a"));
  // Even when they look like flags.
  b = ParseBatchInvocation({"--ntasks=x", "--bogus", "--script", "S"});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->ntasks, 1);
}

TEST(ParseBatchInvocation, FlagsInAnyOrderAndDefaults) {
  absl::StatusOr<BatchInvocation> b =
      ParseBatchInvocation({"loom", "_batch", "--script", "S", "--output=o",
                            "--gpus-per-node=4", "--account=a", "--ntasks=3"});
  ASSERT_TRUE(b.ok()) << b.status();
  BatchInvocation want;
  want.script = "S";
  want.output = "o";
  want.gpus_per_node = 4;
  want.account = "a";
  want.ntasks = 3;
  EXPECT_EQ(*b, want);
  EXPECT_FALSE(b->ntasks_per_node.has_value());
  EXPECT_FALSE(b->cpus_per_task.has_value());
  EXPECT_THAT(b->args, IsEmpty());  // no "--": no arguments
}

TEST(ParseBatchInvocation, ScriptMayBeWrittenWithEquals) {
  absl::StatusOr<BatchInvocation> b =
      ParseBatchInvocation({"loom", "_batch", "--script=a=b\nc", "--", "x"});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->script, "a=b\nc");
  EXPECT_THAT(b->args, ElementsAre("x"));
}

TEST(ParseBatchInvocation, EverythingAfterDashDashIsArguments) {
  absl::StatusOr<BatchInvocation> b = ParseBatchInvocation(
      {"loom", "_batch", "--script", "S", "--", "--ntasks=0", "--", "--bogus"});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->ntasks, 1);
  EXPECT_THAT(b->args, ElementsAre("--ntasks=0", "--", "--bogus"));
}

TEST(ParseBatchInvocation, EmptyValuesOfStringFlags) {
  absl::StatusOr<BatchInvocation> b = ParseBatchInvocation(
      {"loom", "_batch", "--partition=", "--error=", "--script", ""});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->partition, "");
  EXPECT_EQ(b->error, "");
  EXPECT_EQ(b->script, "");
}

TEST(ParseBatchInvocation, MissingScript) {
  EXPECT_EQ(SbJobParseError({"loom", "_batch", "--ntasks=2", "--", "a"}),
            "loom _batch: --script is missing");
  EXPECT_EQ(SbJobParseError({"loom", "_batch"}),
            "loom _batch: --script is missing");
  EXPECT_EQ(SbJobParseError({}), "loom _batch: --script is missing");
  // After "--" it is an argument, not the flag.
  EXPECT_EQ(SbJobParseError({"loom", "_batch", "--", "--script", "S"}),
            "loom _batch: --script is missing");
}

TEST(ParseBatchInvocation, UnknownFlagsAndArguments) {
  EXPECT_EQ(
      SbJobParseError({"loom", "_batch", "--frobnicate=1", "--script", "S"}),
      "loom _batch: unknown flag \"--frobnicate\"");
  EXPECT_EQ(SbJobParseError({"loom", "_batch", "-n", "--script", "S"}),
            "loom _batch: unknown flag \"-n\"");
  // Flags are spelled in full.
  EXPECT_EQ(SbJobParseError({"loom", "_batch", "--ntask=1", "--script", "S"}),
            "loom _batch: unknown flag \"--ntask\"");
  EXPECT_EQ(SbJobParseError({"loom", "_batch", "--script", "S", "train.py"}),
            "loom _batch: unexpected argument \"train.py\" (the script's "
            "arguments follow \"--\")");
}

TEST(ParseBatchInvocation, RepeatedFlags) {
  EXPECT_EQ(SbJobParseError({"loom", "_batch", "--ntasks=1", "--ntasks=1",
                             "--script", "S"}),
            "loom _batch: --ntasks: given twice");
  EXPECT_EQ(
      SbJobParseError({"loom", "_batch", "--script", "S", "--script", "T"}),
      "loom _batch: --script: given twice");
  EXPECT_EQ(SbJobParseError(
                {"loom", "_batch", "--error=", "--script", "S", "--error=x"}),
            "loom _batch: --error: given twice");
}

TEST(ParseBatchInvocation, FlagsWithoutValues) {
  EXPECT_EQ(SbJobParseError({"loom", "_batch", "--ntasks", "--script", "S"}),
            "loom _batch: --ntasks: no value (write --ntasks=VALUE)");
  EXPECT_EQ(SbJobParseError({"loom", "_batch", "--output", "--script", "S"}),
            "loom _batch: --output: no value (write --output=VALUE)");
  EXPECT_EQ(SbJobParseError({"loom", "_batch", "--script"}),
            "loom _batch: --script: no value");
}

TEST(ParseBatchInvocation, NumbersMustBePositive) {
  EXPECT_EQ(SbJobParseError({"loom", "_batch", "--ntasks=x", "--script", "S"}),
            "loom _batch: --ntasks: \"x\" is not a positive number");
  for (const char* bad : {"0", "-1", "+3", " 3", "3 ", "", "1.5", "0x10",
                          "2147483648", "99999999999999999999"}) {
    for (const char* flag : {"--ntasks", "--ntasks-per-node", "--cpus-per-task",
                             "--gpus-per-node"}) {
      EXPECT_EQ(SbJobParseError({"loom", "_batch", absl::StrCat(flag, "=", bad),
                                 "--script", "S"}),
                absl::StrCat("loom _batch: ", flag, ": \"", bad,
                             "\" is not a positive number"));
    }
  }
}

// ---------------------------------------------------------------------------
// BuildSbatchJob

constexpr char kSbJobScript[] = "#!/bin/bash\nsrun hostname\n";

SbatchContext SbJobContext() {
  SbatchContext ctx;
  ctx.script = kSbJobScript;
  ctx.script_name = "train.sh";
  ctx.args = {"--epochs", "3"};
  ctx.submit_dir = "/home/ada/exp";
  ctx.submit_host = "login1";
  ctx.user = "ada";
  ctx.environment = {{"HOME", "/home/ada"}, {"PATH", "/usr/bin:/bin"}};
  ctx.node_gpus = 8;
  return ctx;
}

// One node of 8 GPUs, the smallest valid request.
SbatchOptions SbJobOptions() {
  SbatchOptions o;
  o.gpus_per_node = SbatchGpus{"", 8};
  return o;
}

SbatchJob SbJobBuild(const SbatchOptions& o,
                     const SbatchContext& ctx = SbJobContext()) {
  absl::StatusOr<SbatchJob> job = BuildSbatchJob(o, ctx);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return SbatchJob{};
  // The spec is one the server's parser accepts as it is.
  absl::StatusOr<JobSpec> again = ParseJobSpec(JobSpecToJson(job->spec), "t");
  EXPECT_TRUE(again.ok()) << again.status();
  if (again.ok()) {
    EXPECT_EQ(*again, job->spec);
  }
  // The command is the invocation, and it reads back.
  EXPECT_EQ(job->spec.command, BatchInvocationArgv(job->batch));
  absl::StatusOr<BatchInvocation> b = ParseBatchInvocation(job->spec.command);
  EXPECT_TRUE(b.ok()) << b.status();
  if (b.ok()) {
    EXPECT_EQ(*b, job->batch);
  }
  return *std::move(job);
}

std::string SbJobError(const SbatchOptions& o,
                       const SbatchContext& ctx = SbJobContext()) {
  absl::StatusOr<SbatchJob> job = BuildSbatchJob(o, ctx);
  EXPECT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()), StartsWith("sbatch: "));
  return std::string(job.status().message());
}

TEST(BuildSbatchJob, MinimalJob) {
  const SbatchJob job = SbJobBuild(SbJobOptions());
  JobSpec want;
  want.name = "train-sh";
  want.user = "ada";
  want.kind = JobKind::kBatch;
  want.gpus = 8;
  want.nodes = 1;
  want.working_dir = "/home/ada/exp";
  want.env = {{"HOME", "/home/ada"}, {"PATH", "/usr/bin:/bin"}};
  want.command = job.spec.command;
  EXPECT_EQ(job.spec, want);
  EXPECT_EQ(job.spec.tasks, 1);
  EXPECT_EQ(job.spec.gpus_per_task, 1);
  EXPECT_EQ(job.spec.processes_per_task, 1);
  EXPECT_EQ(job.spec.gpu_model, "any");
  EXPECT_EQ(job.spec.project, "default");
  EXPECT_EQ(job.spec.priority, "normal");
  EXPECT_EQ(job.spec.requeue.max, -1);
  EXPECT_FALSE(job.spec.time_limit.has_value());

  BatchInvocation b;
  b.ntasks = 1;
  b.gpus_per_node = 8;
  b.job_name = "train-sh";
  b.submit_dir = "/home/ada/exp";
  b.submit_host = "login1";
  b.account = "default";
  b.output = "slurm-%j.out";
  b.script = kSbJobScript;
  b.args = {"--epochs", "3"};
  EXPECT_EQ(job.batch, b);
  EXPECT_THAT(job.warnings, IsEmpty());
}

TEST(BuildSbatchJob, TheServerAcceptsTheSpec) {
  absl::StatusOr<Cluster> cluster = ClusterPreset("small");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  SbatchOptions o;
  o.nodes = 2;
  o.ntasks_per_node = 8;
  o.gpus_per_task = SbatchGpus{"H200", 1};
  o.cpus_per_task = 4;
  o.mem_bytes = int64_t{64} << 30;
  o.time_limit_seconds = 3600;
  o.partition = "h200";
  const SbatchJob job = SbJobBuild(o);
  absl::StatusOr<JobRequest> req =
      ToJobRequest(job.spec, *cluster, 1, absl::UnixEpoch());
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->user, "ada");
  EXPECT_EQ(req->time_limit, absl::Hours(1));
  EXPECT_EQ(req->shape.gpu_model, cluster->FindGpuModel("h200"));
  EXPECT_EQ(req->shape.tasks * req->shape.gpus_per_task, 16);
}

TEST(BuildSbatchJob, ScriptMustStartWithShebang) {
  SbatchContext ctx = SbJobContext();
  for (const std::string& script :
       {std::string(""), std::string("echo hi\n"), std::string(" #!/bin/sh"),
        std::string("#/bin/sh\n")}) {
    ctx.script = script;
    EXPECT_EQ(SbJobError(SbJobOptions(), ctx),
              "sbatch: the script does not start with \"#!\" (a batch script "
              "needs an interpreter line such as #!/bin/bash)");
  }
}

TEST(BuildSbatchJob, ScriptMustHoldNoNul) {
  SbatchContext ctx = SbJobContext();
  ctx.script = std::string("#!/bin/sh\necho a\0b\n", 19);
  EXPECT_EQ(SbJobError(SbJobOptions(), ctx),
            "sbatch: the script contains a NUL byte");
}

TEST(BuildSbatchJob, ScriptSizeLimit) {
  SbatchContext ctx = SbJobContext();
  ctx.script = "#!/bin/sh\n";
  ctx.script += std::string(kMaxSbatchScriptBytes - ctx.script.size() - 1, 'x');
  ctx.script += "\n";
  ASSERT_EQ(ctx.script.size(), kMaxSbatchScriptBytes);
  EXPECT_EQ(SbJobBuild(SbJobOptions(), ctx).batch.script, ctx.script);
  ctx.script += "x";
  EXPECT_EQ(SbJobError(SbJobOptions(), ctx),
            "sbatch: the script is 100001 bytes; at most 100000 are accepted");
}

TEST(BuildSbatchJob, ScriptAndArgumentsMustBeUtf8) {
  SbatchContext ctx = SbJobContext();
  ctx.script = "#!/bin/sh\necho \xff\n";
  EXPECT_EQ(SbJobError(SbJobOptions(), ctx),
            "sbatch: the script is not UTF-8 text");
  ctx = SbJobContext();
  ctx.args = {"ok", "\xc3"};
  EXPECT_EQ(SbJobError(SbJobOptions(), ctx),
            "sbatch: the script's argument 2 is not UTF-8 text without NUL");
}

TEST(BuildSbatchJob, NodesFromOptions) {
  SbatchOptions o = SbJobOptions();
  EXPECT_EQ(SbJobBuild(o).spec.nodes, 1);  // nothing given
  o.nodes = 3;
  SbatchJob job = SbJobBuild(o);
  EXPECT_EQ(job.spec.nodes, 3);
  EXPECT_EQ(job.batch.ntasks, 3);  // one per node by default
  EXPECT_EQ(job.spec.gpus, 24);

  o = SbJobOptions();
  o.ntasks = 8;
  o.ntasks_per_node = 4;
  EXPECT_EQ(SbJobBuild(o).spec.nodes, 2);
  o.ntasks = 9;
  EXPECT_EQ(SbJobBuild(o).spec.nodes, 3);  // rounded up
  o.ntasks_per_node.reset();
  EXPECT_EQ(SbJobBuild(o).spec.nodes, 1);  // -n alone: one node
  o.ntasks.reset();
  o.ntasks_per_node = 4;
  job = SbJobBuild(o);
  EXPECT_EQ(job.spec.nodes, 1);
  EXPECT_EQ(job.batch.ntasks, 4);
  EXPECT_EQ(job.batch.ntasks_per_node, 4);
}

TEST(BuildSbatchJob, NodeRangeAllocatesTheMinimum) {
  SbatchOptions o = SbJobOptions();
  o.nodes = 2;
  o.nodes_max = 4;
  const SbatchJob job = SbJobBuild(o);
  EXPECT_EQ(job.spec.nodes, 2);
  EXPECT_THAT(job.warnings,
              ElementsAre("-N/--nodes 2-4: loom allocates exactly 2 nodes"));
  o.nodes_max = 2;  // "2-2": no range at all
  EXPECT_THAT(SbJobBuild(o).warnings, IsEmpty());
}

TEST(BuildSbatchJob, Tasks) {
  SbatchOptions o = SbJobOptions();
  o.nodes = 2;
  o.ntasks_per_node = 4;
  EXPECT_EQ(SbJobBuild(o).batch.ntasks, 8);
  o.ntasks = 6;  // fewer than 2 x 4 is fine
  SbatchJob job = SbJobBuild(o);
  EXPECT_EQ(job.batch.ntasks, 6);
  // A loom task is a node: the spec keeps its defaults.
  EXPECT_EQ(job.spec.tasks, 1);
  EXPECT_EQ(job.spec.gpus_per_task, 1);
  EXPECT_EQ(job.spec.processes_per_task, 1);
}

TEST(BuildSbatchJob, TaskCountErrors) {
  SbatchOptions o = SbJobOptions();
  o.nodes = 4;
  o.ntasks = 3;
  EXPECT_EQ(SbJobError(o),
            "sbatch: -n/--ntasks 3 is fewer tasks than -N/--nodes 4 (every "
            "node runs at least one)");
  o.ntasks = 9;
  o.ntasks_per_node = 2;
  EXPECT_EQ(SbJobError(o),
            "sbatch: -n/--ntasks 9 is more than -N/--nodes 4 x "
            "--ntasks-per-node 2 tasks");
  o = SbJobOptions();
  o.nodes = 0;
  EXPECT_EQ(SbJobError(o), "sbatch: -N/--nodes: must be at least 1, got 0");
  o = SbJobOptions();
  o.ntasks = -2;
  EXPECT_EQ(SbJobError(o), "sbatch: -n/--ntasks: must be at least 1, got -2");
}

TEST(BuildSbatchJob, GpusPerNode) {
  SbatchOptions o;
  o.nodes = 2;
  o.gpus_per_node = SbatchGpus{"H200", 4};
  SbatchJob job = SbJobBuild(o, [] {
    SbatchContext ctx = SbJobContext();
    ctx.node_gpus = 0;  // unknown
    return ctx;
  }());
  EXPECT_EQ(job.spec.gpus, 8);
  EXPECT_EQ(job.spec.nodes, 2);
  EXPECT_EQ(job.spec.gpu_model, "h200");  // lower-cased
  EXPECT_EQ(job.batch.gpus_per_node, 4);
}

TEST(BuildSbatchJob, TotalGpus) {
  SbatchOptions o;
  o.nodes = 2;
  o.gpus = SbatchGpus{"", 16};
  const SbatchJob job = SbJobBuild(o);
  EXPECT_EQ(job.spec.gpus, 16);
  EXPECT_EQ(job.spec.nodes, 2);
  EXPECT_EQ(job.spec.gpu_model, "any");
  // Only a per-node count is passed on as SLURM_GPUS_PER_NODE.
  EXPECT_FALSE(job.batch.gpus_per_node.has_value());
  o.nodes = 4;
  o.gpus = SbatchGpus{"a100", 6};
  EXPECT_EQ(SbJobError(o),
            "sbatch: -G/--gpus 6 cannot be spread evenly over 4 nodes");
}

TEST(BuildSbatchJob, GpusPerTask) {
  SbatchOptions o;
  o.nodes = 2;
  o.ntasks = 8;
  o.gpus_per_task = SbatchGpus{"A100", 2};
  SbatchJob job = SbJobBuild(o);
  EXPECT_EQ(job.spec.gpus, 16);  // 2 x 8 tasks
  EXPECT_EQ(job.spec.nodes, 2);
  EXPECT_EQ(job.spec.gpu_model, "a100");
  EXPECT_FALSE(job.batch.gpus_per_node.has_value());
  o.ntasks = 5;
  EXPECT_EQ(SbJobError(o),
            "sbatch: --gpus-per-task: 5 tasks cannot be spread evenly over 2 "
            "nodes");
}

TEST(BuildSbatchJob, AtMostOneGpuOption) {
  SbatchOptions o;
  o.gpus = SbatchGpus{"", 8};
  o.gpus_per_node = SbatchGpus{"", 8};
  EXPECT_EQ(SbJobError(o),
            "sbatch: -G/--gpus and --gpus-per-node/--gres cannot be combined: "
            "give the GPUs one way (loom gives every node the same number)");
  o.gpus.reset();
  o.gpus_per_task = SbatchGpus{"", 1};
  EXPECT_EQ(SbJobError(o),
            "sbatch: --gpus-per-node/--gres and --gpus-per-task cannot be "
            "combined: give the GPUs one way (loom gives every node the same "
            "number)");
}

TEST(BuildSbatchJob, EveryJobNeedsGpus) {
  const std::string want =
      "sbatch: the job asks for no GPUs; give -G/--gpus, "
      "--gpus-per-node/--gres or --gpus-per-task (loom allocates GPUs and "
      "every job needs one)";
  EXPECT_EQ(SbJobError(SbatchOptions{}), want);
  // --exclusive needs a known node size.
  SbatchOptions o;
  o.exclusive = true;
  SbatchContext ctx = SbJobContext();
  ctx.node_gpus = 0;
  EXPECT_EQ(SbJobError(o, ctx), want);
  o = SbJobOptions();
  o.gpus_per_node->count = 0;
  EXPECT_EQ(SbJobError(o),
            "sbatch: --gpus-per-node/--gres: must be at least 1, got 0");
}

TEST(BuildSbatchJob, ExclusiveTakesWholeNodes) {
  SbatchOptions o;
  o.exclusive = true;
  o.nodes = 3;
  SbatchJob job = SbJobBuild(o);
  EXPECT_EQ(job.spec.gpus, 24);
  EXPECT_THAT(job.warnings, IsEmpty());

  o.gpus_per_node = SbatchGpus{"h200", 2};
  job = SbJobBuild(o);
  EXPECT_EQ(job.spec.gpus, 24);
  EXPECT_EQ(job.spec.gpu_model, "h200");
  EXPECT_THAT(job.warnings,
              ElementsAre("--exclusive: each node's 2 GPUs become all 8 GPUs "
                          "of the node"));
  EXPECT_EQ(job.batch.gpus_per_node, 2);  // what the user asked for

  // Without a known node size --exclusive changes nothing.
  SbatchContext ctx = SbJobContext();
  ctx.node_gpus = 0;
  job = SbJobBuild(o, ctx);
  EXPECT_EQ(job.spec.gpus, 6);
  EXPECT_THAT(job.warnings, IsEmpty());
  // Nor does --exclusive=false (not given).
  o.exclusive.reset();
  EXPECT_EQ(SbJobBuild(o).spec.gpus, 6);
}

TEST(BuildSbatchJob, CpusPerTaskBecomeANodesShare) {
  SbatchOptions o = SbJobOptions();
  o.nodes = 2;
  o.ntasks = 8;
  o.cpus_per_task = 8;
  SbatchJob job = SbJobBuild(o);
  EXPECT_EQ(job.spec.cpus_milli_per_task, 8 * 1000 * 4);
  EXPECT_EQ(job.batch.cpus_per_task, 8);
  o.ntasks = 5;  // 3 tasks on the fuller node
  o.cpus_per_task = 2;
  EXPECT_EQ(SbJobBuild(o).spec.cpus_milli_per_task, 6000);
  o.cpus_per_task = 0;
  EXPECT_EQ(SbJobError(o),
            "sbatch: -c/--cpus-per-task: must be at least 1, got 0");
  EXPECT_EQ(SbJobBuild(SbJobOptions()).spec.cpus_milli_per_task, 0);
}

TEST(BuildSbatchJob, Memory) {
  SbatchOptions o = SbJobOptions();
  o.mem_bytes = int64_t{512} << 30;
  SbatchJob job = SbJobBuild(o);
  EXPECT_EQ(job.spec.memory_bytes_per_task, int64_t{512} << 30);
  EXPECT_THAT(job.warnings, IsEmpty());
  o.mem_bytes = 0;
  job = SbJobBuild(o);
  EXPECT_EQ(job.spec.memory_bytes_per_task, 0);
  EXPECT_THAT(job.warnings,
              ElementsAre("--mem=0: loom has no \"all of a node's memory\"; "
                          "the job asks for no memory"));
}

TEST(BuildSbatchJob, TimeLimit) {
  SbatchOptions o = SbJobOptions();
  o.time_limit_seconds = 90 * 60;
  EXPECT_EQ(SbJobBuild(o).spec.time_limit, absl::Minutes(90));
  o.time_limit_seconds = 0;  // UNLIMITED
  EXPECT_FALSE(SbJobBuild(o).spec.time_limit.has_value());
  // The spec parser's limit, under the option's name.
  o.time_limit_seconds = int64_t{400} * 24 * 3600;
  EXPECT_THAT(SbJobError(o), StartsWith("sbatch: -t/--time: must be at most"));
}

TEST(BuildSbatchJob, PartitionIsThePool) {
  SbatchOptions o = SbJobOptions();
  o.partition = "h200";
  const SbatchJob job = SbJobBuild(o);
  EXPECT_THAT(job.spec.node_selector, ElementsAre(Pair("pool", "h200")));
  EXPECT_EQ(job.batch.partition, "h200");
  EXPECT_EQ(SbJobBuild(SbJobOptions()).batch.partition, "");
}

TEST(BuildSbatchJob, Constraint) {
  SbatchOptions o = SbJobOptions();
  o.constraint = "nvme&gpu.driver=550.54.15&leaf=l1";
  EXPECT_THAT(SbJobBuild(o).spec.node_selector,
              ElementsAre(Pair("gpu.driver", "550.54.15"), Pair("leaf", "l1"),
                          Pair("nvme", "")));
  // Repeated with the same value, and with -p.
  o.constraint = "nvme&nvme&pool=a";
  o.partition = "a";
  EXPECT_THAT(SbJobBuild(o).spec.node_selector,
              ElementsAre(Pair("nvme", ""), Pair("pool", "a")));
  // A pool term without -p.
  o.partition.reset();
  o.constraint = "pool=b";
  EXPECT_THAT(SbJobBuild(o).spec.node_selector, ElementsAre(Pair("pool", "b")));
}

TEST(BuildSbatchJob, ConstraintErrors) {
  SbatchOptions o = SbJobOptions();
  for (const auto& [text, c] : {std::pair{"a|b", "|"},
                                {"[a&b]", "["},
                                {"a]", "]"},
                                {"a*2", "*"},
                                {"a,b", ","}}) {
    o.constraint = text;
    EXPECT_EQ(SbJobError(o),
              absl::StrCat("sbatch: -C/--constraint: '", text, "': '", c,
                           "' is not supported (loom constraints are KEY or "
                           "KEY=VALUE terms joined by '&')"));
  }
  for (const char* text : {"", "a&&b", "a&", "&a"}) {
    o.constraint = text;
    EXPECT_EQ(SbJobError(o), absl::StrCat("sbatch: -C/--constraint: '", text,
                                          "' has an empty term"));
  }
  o.constraint = "x=1&x=2";
  EXPECT_EQ(SbJobError(o),
            "sbatch: -C/--constraint: 'x' is given twice with different "
            "values");
  o.constraint = "x&x=2";
  EXPECT_EQ(SbJobError(o),
            "sbatch: -C/--constraint: 'x' is given twice with different "
            "values");
  o.constraint = "pool=b";
  o.partition = "a";
  EXPECT_EQ(SbJobError(o),
            "sbatch: -C/--constraint: 'pool=b' differs from -p/--partition "
            "'a'");
  o.constraint = "pool";
  EXPECT_EQ(SbJobError(o),
            "sbatch: -C/--constraint: 'pool' differs from -p/--partition 'a'");
  o.partition.reset();
  o.constraint = "-bad";
  EXPECT_THAT(SbJobError(o),
              StartsWith("sbatch: -C/--constraint: '-bad': write KEY=VALUE"));
  o.constraint = "k=";
  EXPECT_EQ(SbJobError(o),
            "sbatch: -C/--constraint: 'k=' has no value (write KEY alone for "
            "any value)");
}

TEST(BuildSbatchJob, AccountAndQos) {
  SbatchOptions o = SbJobOptions();
  o.account = "vision";
  o.qos = "high";
  SbatchJob job = SbJobBuild(o);
  EXPECT_EQ(job.spec.project, "vision");
  EXPECT_EQ(job.spec.priority, "high");
  EXPECT_EQ(job.batch.account, "vision");
  o.account = "a b";
  EXPECT_EQ(SbJobError(o),
            "sbatch: -A/--account: 'a b' is not a valid project name (1 to 128 "
            "bytes, no spaces or control characters)");
  o.account.reset();
  o.qos = "";
  EXPECT_EQ(SbJobError(o),
            "sbatch: --qos: '' is not a valid priority class name (1 to 128 "
            "bytes, no spaces or control characters)");
}

TEST(BuildSbatchJob, Array) {
  SbatchOptions o = SbJobOptions();
  o.array = "3,1,2,7-11:2%4";
  SbatchJob job = SbJobBuild(o);
  absl::StatusOr<ArraySpec> a = ParseArraySpec("3,1,2,7-11:2%4");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(job.spec.array, FormatArraySpec(*a));
  EXPECT_EQ(job.spec.array, "1-3,7-11:2%4");
  EXPECT_EQ(job.batch.output, "slurm-%A_%a.out");
  o.output = "run-%a.log";
  EXPECT_EQ(SbJobBuild(o).batch.output, "run-%a.log");
  o.array = "5-1";
  EXPECT_THAT(SbJobError(o), StartsWith("sbatch: -a/--array: "));
}

TEST(BuildSbatchJob, Dependency) {
  SbatchOptions o = SbJobOptions();
  o.dependency = "afterok:12:13,singleton";
  o.kill_on_invalid_dep = true;
  SbatchJob job = SbJobBuild(o);
  absl::StatusOr<JobDependency> d = ParseDependency("afterok:12:13,singleton");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(job.spec.dependency, FormatDependency(*d));
  EXPECT_TRUE(job.spec.kill_on_invalid_dep);
  o.kill_on_invalid_dep = false;
  EXPECT_FALSE(SbJobBuild(o).spec.kill_on_invalid_dep);
  o.dependency = "afterok:x";
  EXPECT_THAT(SbJobError(o), StartsWith("sbatch: -d/--dependency: "));
  EXPECT_THAT(SbJobError(o), HasSubstr("afterok:x"));
}

TEST(BuildSbatchJob, Hold) {
  SbatchOptions o = SbJobOptions();
  EXPECT_FALSE(SbJobBuild(o).spec.hold);
  o.hold = true;
  EXPECT_TRUE(SbJobBuild(o).spec.hold);
}

TEST(BuildSbatchJob, Requeue) {
  SbatchOptions o = SbJobOptions();
  const RestartSpec by_default = JobSpec{}.requeue;
  EXPECT_EQ(SbJobBuild(o).spec.requeue, by_default);
  o.requeue = true;
  EXPECT_EQ(SbJobBuild(o).spec.requeue, by_default);
  o.requeue = false;
  EXPECT_EQ(SbJobBuild(o).spec.requeue.max, 0);
}

TEST(BuildSbatchJob, Signal) {
  SbatchOptions o = SbJobOptions();
  o.signal = SbatchSignal{false, SIGUSR2, 300};
  SbatchJob job = SbJobBuild(o);
  EXPECT_EQ(job.spec.checkpoint.signal, SIGUSR2);
  EXPECT_EQ(job.spec.checkpoint.grace, absl::Seconds(300));
  EXPECT_THAT(job.warnings, IsEmpty());
  o.signal = SbatchSignal{true, SIGTERM, 60};
  job = SbJobBuild(o);
  EXPECT_EQ(job.spec.checkpoint.signal, SIGTERM);
  EXPECT_EQ(job.spec.checkpoint.grace, absl::Seconds(60));
  EXPECT_THAT(job.warnings,
              ElementsAre("--signal: B: is ignored; loom signals every "
                          "process of the job"));
  // Without --signal: the spec's default.
  EXPECT_EQ(SbJobBuild(SbJobOptions()).spec.checkpoint, CheckpointSpec{});
  o.signal = SbatchSignal{false, SIGKILL, 60};
  EXPECT_EQ(SbJobError(o),
            "sbatch: --signal: SIGKILL cannot be caught, so the job would get "
            "no warning");
  o.signal = SbatchSignal{false, SIGUSR1, 2 * 24 * 3600};
  EXPECT_THAT(SbJobError(o),
              StartsWith("sbatch: --signal: the time before the end must be "
                         "at most"));
}

TEST(BuildSbatchJob, WorkingDirectory) {
  SbatchOptions o = SbJobOptions();
  EXPECT_EQ(SbJobBuild(o).spec.working_dir, "/home/ada/exp");
  for (const auto& [dir, want] : {std::pair{"/data/run/", "/data/run"},
                                  {"/", "/"},
                                  {"//data//./x/.", "/data/x"},
                                  {"out", "/home/ada/exp/out"},
                                  {"./a//b/./", "/home/ada/exp/a/b"},
                                  {".", "/home/ada/exp"}}) {
    o.chdir = dir;
    SbatchJob job = SbJobBuild(o);
    EXPECT_EQ(job.spec.working_dir, want) << dir;
    // SLURM_SUBMIT_DIR stays where sbatch ran.
    EXPECT_EQ(job.batch.submit_dir, "/home/ada/exp");
  }
  o.chdir = "../x";
  EXPECT_EQ(SbJobError(o),
            "sbatch: -D/--chdir: must not contain '..', got "
            "'/home/ada/exp/../x'");
  o.chdir = "/a/b/..";
  EXPECT_EQ(SbJobError(o),
            "sbatch: -D/--chdir: must not contain '..', got '/a/b/..'");
  o.chdir = "";
  EXPECT_EQ(SbJobError(o), "sbatch: -D/--chdir: must not be empty");
  SbatchContext ctx = SbJobContext();
  ctx.submit_dir = "";
  o.chdir = "x";
  EXPECT_EQ(SbJobError(o, ctx),
            "sbatch: -D/--chdir: 'x' is relative and the submission directory "
            "is not known");
}

SbatchContext SbJobRichEnvironment() {
  SbatchContext ctx = SbJobContext();
  ctx.environment = {{"HOME", "/home/ada"},
                     {"PATH", "/usr/bin"},
                     {"SLURM_JOB_ID", "7"},
                     {"SLURM_CONF", "/etc/slurm.conf"},
                     {"PWD", "/home/ada/exp"},
                     {"OLDPWD", "/"},
                     {"SHLVL", "2"},
                     {"_", "/usr/bin/loom"},
                     {"LOOM_SERVER", "http://x"},
                     {"LOOM_FAKE_SECONDS", "3"},
                     {"CUDA_VISIBLE_DEVICES", "0"},
                     {"RANK", "0"},
                     {"BASH_FUNC_x%%", "() { :; }"},
                     {"1BAD", "x"},
                     {"LANG", "C.UTF-8"},
                     {"WITH_EQ", "a=b c"}};
  return ctx;
}

TEST(BuildSbatchJob, ExportAllByDefault) {
  const SbatchJob job = SbJobBuild(SbJobOptions(), SbJobRichEnvironment());
  EXPECT_THAT(
      job.spec.env,
      UnorderedElementsAre(Pair("HOME", "/home/ada"), Pair("PATH", "/usr/bin"),
                           Pair("LOOM_FAKE_SECONDS", "3"),
                           Pair("LANG", "C.UTF-8"), Pair("WITH_EQ", "a=b c")));
  EXPECT_THAT(job.warnings, IsEmpty());
  SbatchOptions o = SbJobOptions();
  o.export_env = SbatchExport{true, {}};
  EXPECT_EQ(SbJobBuild(o, SbJobRichEnvironment()).spec.env, job.spec.env);
}

TEST(BuildSbatchJob, ExportNone) {
  SbatchOptions o = SbJobOptions();
  o.export_env = SbatchExport{false, {}};
  EXPECT_THAT(SbJobBuild(o, SbJobRichEnvironment()).spec.env, IsEmpty());
}

TEST(BuildSbatchJob, ExportList) {
  SbatchOptions o = SbJobOptions();
  o.export_env =
      SbatchExport{false,
                   {{"HOME", std::nullopt},
                    {"FOO", std::string("x=1 2")},
                    {"MISSING", std::nullopt},
                    {"SLURM_CONF", std::nullopt},  // named: passed on
                    {"EMPTY", std::string("")}}};
  SbatchJob job = SbJobBuild(o, SbJobRichEnvironment());
  EXPECT_THAT(job.spec.env,
              UnorderedElementsAre(
                  Pair("HOME", "/home/ada"), Pair("FOO", "x=1 2"),
                  Pair("SLURM_CONF", "/etc/slurm.conf"), Pair("EMPTY", "")));
  EXPECT_THAT(job.warnings,
              ElementsAre("--export: MISSING is not set in the environment; "
                          "skipped"));
  // ALL plus a list: the given values win.
  o.export_env = SbatchExport{true, {{"HOME", std::string("/tmp")}}};
  job = SbJobBuild(o, SbJobRichEnvironment());
  EXPECT_EQ(job.spec.env.at("HOME"), "/tmp");
  EXPECT_EQ(job.spec.env.at("PATH"), "/usr/bin");
  EXPECT_FALSE(job.spec.env.contains("SLURM_JOB_ID"));
}

TEST(BuildSbatchJob, ExportErrors) {
  SbatchOptions o = SbJobOptions();
  o.export_env = SbatchExport{false, {{"CUDA_VISIBLE_DEVICES", "1"}}};
  EXPECT_EQ(SbJobError(o),
            "sbatch: --export: 'CUDA_VISIBLE_DEVICES' is set by loom for every "
            "task and cannot be exported");
  o.export_env = SbatchExport{false, {{"LOOM_TOKEN", std::nullopt}}};
  EXPECT_EQ(SbJobError(o),
            "sbatch: --export: 'LOOM_TOKEN' is set by loom for every task and "
            "cannot be exported");
  o.export_env = SbatchExport{false, {{"1X", "1"}}};
  EXPECT_EQ(SbJobError(o),
            "sbatch: --export: '1X' is not a variable name (letters, digits "
            "and '_', not starting with a digit)");
  o.export_env = SbatchExport{false, {{"X", "\xff"}}};
  EXPECT_EQ(SbJobError(o),
            "sbatch: --export: the value of X is not UTF-8 text");
}

TEST(BuildSbatchJob, ExportAllSkipsValuesThatAreNotUtf8) {
  SbatchContext ctx = SbJobContext();
  ctx.environment.push_back({"BIN", "\xfe"});
  const SbatchJob job = SbJobBuild(SbJobOptions(), ctx);
  EXPECT_FALSE(job.spec.env.contains("BIN"));
  EXPECT_THAT(job.warnings,
              ElementsAre("--export: BIN is not passed on: its value is not "
                          "UTF-8"));
}

TEST(BuildSbatchJob, JobNameOption) {
  SbatchOptions o = SbJobOptions();
  o.job_name = "resnet-50";
  SbatchJob job = SbJobBuild(o);
  EXPECT_EQ(job.spec.name, "resnet-50");
  EXPECT_EQ(job.batch.job_name, "resnet-50");
  for (const char* bad : {"ResNet", "", "1run", "a_b", "-x"}) {
    o.job_name = bad;
    EXPECT_EQ(SbJobError(o),
              absl::StrCat("sbatch: -J/--job-name: '", bad,
                           "' is not a valid job name (1 to 63 lower-case "
                           "letters, digits and '-', starting with a letter)"));
  }
  o.job_name = std::string(64, 'a');
  EXPECT_THAT(SbJobError(o), HasSubstr("is not a valid job name"));
}

TEST(BuildSbatchJob, JobNameFromScriptName) {
  const std::string long_name = std::string(70, 'a') + ".sh";
  const std::string dash_at_63 = std::string(62, 'b') + "_c.sh";
  for (const auto& [script_name, want] :
       std::vector<std::pair<std::string, std::string>>{
           {"train.sh", "train-sh"},
           {"./jobs/My_Job.SH", "my-job-sh"},
           {"/abs/path/run", "run"},
           {"jobs/dir/", "dir"},
           {"2024-run.sh", "job-2024-run-sh"},
           {"__x__", "x"},
           {"___", "job"},
           {"", "job"},
           {"/", "job"},
           {"été.sh", "t-sh"},
           {long_name, std::string(63, 'a')},
           {dash_at_63, std::string(62, 'b')}}) {
    SbatchContext ctx = SbJobContext();
    ctx.script_name = script_name;
    const SbatchJob job = SbJobBuild(SbJobOptions(), ctx);
    EXPECT_EQ(job.spec.name, want) << script_name;
    EXPECT_TRUE(IsValidJobName(job.spec.name)) << script_name;
    EXPECT_EQ(job.batch.job_name, want);
  }
}

TEST(BuildSbatchJob, KindUserAndCommand) {
  SbatchContext ctx = SbJobContext();
  ctx.user = "";
  SbatchJob job = SbJobBuild(SbJobOptions(), ctx);
  EXPECT_EQ(job.spec.kind, JobKind::kBatch);
  EXPECT_EQ(job.spec.user, "");
  ASSERT_GE(job.spec.command.size(), 2u);
  EXPECT_EQ(job.spec.command[0], "loom");
  EXPECT_EQ(job.spec.command[1], "_batch");
  ctx.user = "bob";
  EXPECT_EQ(SbJobBuild(SbJobOptions(), ctx).spec.user, "bob");
  // The spec parser judges what BuildSbatchJob does not check itself.
  ctx.user = "-rf";
  EXPECT_THAT(SbJobError(SbJobOptions(), ctx),
              StartsWith("sbatch: user: '-rf' is not a valid user name"));
}

TEST(BuildSbatchJob, BatchInvocationFields) {
  SbatchOptions o = SbJobOptions();
  o.nodes = 2;
  o.ntasks_per_node = 4;
  o.cpus_per_task = 6;
  o.output = "logs/%x-%j.out";
  o.error = "logs/%x-%j.err";
  o.account = "vision";
  o.partition = "h200";
  o.job_name = "exp";
  SbatchContext ctx = SbJobContext();
  ctx.args = {"", "a b", "--"};
  const SbatchJob job = SbJobBuild(o, ctx);
  const BatchInvocation& b = job.batch;
  EXPECT_EQ(b.ntasks, 8);
  EXPECT_EQ(b.ntasks_per_node, 4);
  EXPECT_EQ(b.cpus_per_task, 6);
  EXPECT_EQ(b.gpus_per_node, 8);
  EXPECT_EQ(b.job_name, "exp");
  EXPECT_EQ(b.submit_dir, "/home/ada/exp");
  EXPECT_EQ(b.submit_host, "login1");
  EXPECT_EQ(b.account, "vision");
  EXPECT_EQ(b.partition, "h200");
  EXPECT_EQ(b.output, "logs/%x-%j.out");
  EXPECT_EQ(b.error, "logs/%x-%j.err");
  EXPECT_EQ(b.script, kSbJobScript);
  EXPECT_THAT(b.args, ElementsAre("", "a b", "--"));
  EXPECT_EQ(job.spec.cpus_milli_per_task, 24000);
}

TEST(BuildSbatchJob, BatchStringsMustBeUtf8) {
  SbatchOptions o = SbJobOptions();
  o.output = "out-\xff";
  EXPECT_EQ(SbJobError(o), "sbatch: -o/--output: not UTF-8 text without NUL");
  SbatchContext ctx = SbJobContext();
  ctx.submit_host = std::string("h\0st", 4);
  EXPECT_EQ(SbJobError(SbJobOptions(), ctx),
            "sbatch: the submission host: not UTF-8 text without NUL");
}

TEST(BuildSbatchJob, ParsableChangesNothing) {
  SbatchOptions o = SbJobOptions();
  const SbatchJob plain = SbJobBuild(o);
  o.parsable = true;
  const SbatchJob parsable = SbJobBuild(o);
  EXPECT_EQ(parsable.spec, plain.spec);
  EXPECT_EQ(parsable.batch, plain.batch);
}

TEST(BuildSbatchJob, FromAParsedScript) {
  const std::string text =
      "#!/bin/bash\n"
      "#SBATCH -J llm-pretrain\n"
      "#SBATCH -N 4 --ntasks-per-node=8\n"
      "#SBATCH --gpus-per-node=h200:8 -c 12 --mem=500G\n"
      "#SBATCH -t 2-00:00:00 -p h200 -A research --qos=high\n"
      "#SBATCH --signal=B:USR1@120 --no-requeue\n"
      "srun python train.py\n";
  absl::StatusOr<SbatchScript> script = ParseSbatchScript(text);
  ASSERT_TRUE(script.ok()) << script.status();
  SbatchContext ctx = SbJobContext();
  ctx.script = text;
  const SbatchJob job = SbJobBuild(script->options, ctx);
  EXPECT_EQ(job.spec.name, "llm-pretrain");
  EXPECT_EQ(job.spec.nodes, 4);
  EXPECT_EQ(job.spec.gpus, 32);
  EXPECT_EQ(job.spec.gpu_model, "h200");
  EXPECT_EQ(job.spec.cpus_milli_per_task, 12 * 8 * 1000);
  EXPECT_EQ(job.spec.memory_bytes_per_task, int64_t{500} << 30);
  EXPECT_EQ(job.spec.time_limit, absl::Hours(48));
  EXPECT_THAT(job.spec.node_selector, ElementsAre(Pair("pool", "h200")));
  EXPECT_EQ(job.spec.project, "research");
  EXPECT_EQ(job.spec.priority, "high");
  EXPECT_EQ(job.spec.checkpoint.signal, SIGUSR1);
  EXPECT_EQ(job.spec.checkpoint.grace, absl::Seconds(120));
  EXPECT_EQ(job.spec.requeue.max, 0);
  EXPECT_EQ(job.batch.ntasks, 32);
  EXPECT_EQ(job.batch.gpus_per_node, 8);
  EXPECT_THAT(job.warnings, ElementsAre(HasSubstr("B: is ignored")));
}

}  // namespace
}  // namespace loom
