#include "loom/core/srun_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

SrunCommandLine SrunParse(const std::vector<std::string>& argv) {
  absl::StatusOr<SrunCommandLine> cl = ParseSrunArgs(argv);
  EXPECT_TRUE(cl.ok()) << cl.status();
  return cl.ok() ? *cl : SrunCommandLine{};
}

std::string SrunParseError(const std::vector<std::string>& argv) {
  absl::StatusOr<SrunCommandLine> cl = ParseSrunArgs(argv);
  EXPECT_FALSE(cl.ok());
  return cl.ok() ? "" : std::string(cl.status().message());
}

TEST(ParseSrunArgs, OptionFormsAndCommand) {
  SrunCommandLine cl = SrunParse(
      {"-N2", "--ntasks=4", "--ntasks-per-node", "2", "-l", "-w", "a[1-2]",
       "-x", "b", "-J", "step", "-c8", "python3", "-u", "train.py", "--lr=1"});
  EXPECT_EQ(cl.options.nodes, 2);
  EXPECT_EQ(cl.options.ntasks, 4);
  EXPECT_EQ(cl.options.ntasks_per_node, 2);
  EXPECT_EQ(cl.options.nodelist, "a[1-2]");
  EXPECT_EQ(cl.options.exclude, "b");
  EXPECT_TRUE(cl.options.label);
  EXPECT_EQ(cl.options.job_name, "step");
  EXPECT_EQ(cl.options.cpus_per_task, 8);
  // Options end at the command: its own -u and --lr belong to it.
  EXPECT_THAT(cl.options.command,
              ElementsAre("python3", "-u", "train.py", "--lr=1"));
  EXPECT_TRUE(cl.warnings.empty());
}

TEST(ParseSrunArgs, DoubleDashEndsOptions) {
  SrunCommandLine cl = SrunParse({"-n", "2", "--", "-weird-program", "x"});
  EXPECT_EQ(cl.options.ntasks, 2);
  EXPECT_THAT(cl.options.command, ElementsAre("-weird-program", "x"));
}

TEST(ParseSrunArgs, GroupedFlagsAndNodeRange) {
  SrunCommandLine cl = SrunParse({"-lu", "-N", "2-4", "hostname"});
  EXPECT_TRUE(cl.options.label);
  EXPECT_EQ(cl.options.nodes, 2);
  EXPECT_THAT(cl.warnings, ElementsAre(HasSubstr("--unbuffered is ignored")));
  // A value-taking short option ends the group.
  EXPECT_EQ(SrunParse({"-ln2", "true"}).options.ntasks, 2);
}

TEST(ParseSrunArgs, IgnoredOptionsWarn) {
  SrunCommandLine cl =
      SrunParse({"-K", "--kill-on-bad-exit=1", "--mpi=pmix", "--cpu-bind=cores",
                 "--gpu-bind", "closest", "-m", "block", "--exclusive",
                 "--overlap", "--export=ALL", "true"});
  EXPECT_EQ(cl.warnings.size(), 9u);
  EXPECT_THAT(cl.warnings[2], HasSubstr("--mpi is ignored"));
  EXPECT_THAT(cl.options.command, ElementsAre("true"));
}

TEST(ParseSrunArgs, Errors) {
  EXPECT_EQ(SrunParseError({"--frobnicate", "x"}),
            "unknown option \"--frobnicate\"");
  EXPECT_EQ(SrunParseError({"-G", "1", "x"}), "unknown option \"-G\"");
  EXPECT_EQ(SrunParseError({"-lZ", "x"}), "unknown option \"-Z\"");
  EXPECT_EQ(SrunParseError({"--ntasks=x", "true"}),
            "--ntasks: \"x\" is not a number");
  EXPECT_EQ(SrunParseError({"-n", "0", "true"}),
            "--ntasks: \"0\" must be positive");
  EXPECT_EQ(SrunParseError({"-N", "3-2", "true"}),
            "--nodes: \"3-2\" is not a node count (N or MIN-MAX)");
  EXPECT_EQ(SrunParseError({"-n"}), "-n/--ntasks needs a value");
  EXPECT_EQ(SrunParseError({"--nodes"}), "--nodes needs a value");
  EXPECT_EQ(SrunParseError({"--label=yes", "true"}), "--label takes no value");
  EXPECT_EQ(SrunParseError({"-n", "2"}), "no command to run");
  EXPECT_EQ(SrunParseError({}), "no command to run");
  EXPECT_THAT(SrunParseError({"--export=NONE", "true"}),
              HasSubstr("--export: only ALL is supported"));
  EXPECT_THAT(SrunParseError({"-w", "a[1-", "true"}),
              HasSubstr("--nodelist: "));
  EXPECT_EQ(SrunParseError({"-J", "", "true"}),
            "--job-name: the value is empty");
}

// Four nodes whose hosts sort differently from the job's order.
std::vector<AllocationNode> SrunAlloc() {
  return {{"h200-2", "127.0.0.4"},
          {"h200-0", "127.0.0.2"},
          {"h200-1", "127.0.0.3"},
          {"h200-3", "127.0.0.5"}};
}

StepPlan SrunPlan(const std::vector<std::string>& args,
                  int default_ntasks = 4) {
  std::vector<std::string> argv = args;
  argv.push_back("true");
  absl::StatusOr<StepPlan> plan =
      PlanStep(SrunParse(argv).options, SrunAlloc(), default_ntasks);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : StepPlan{};
}

std::string SrunPlanError(const std::vector<std::string>& args,
                          int default_ntasks = 4) {
  std::vector<std::string> argv = args;
  argv.push_back("true");
  absl::StatusOr<StepPlan> plan =
      PlanStep(SrunParse(argv).options, SrunAlloc(), default_ntasks);
  EXPECT_FALSE(plan.ok());
  return plan.ok() ? "" : std::string(plan.status().message());
}

TEST(PlanStep, DefaultIsEveryNodeInNodelistOrder) {
  StepPlan p = SrunPlan({}, 4);
  EXPECT_EQ(p.ntasks, 4);
  // Hosts sorted: .2 (index 1), .3 (2), .4 (0), .5 (3).
  EXPECT_EQ(p.nodes, (std::vector<StepNodePlan>{
                         {1, 1, 0}, {2, 1, 1}, {0, 1, 2}, {3, 1, 3}}));
  EXPECT_EQ(p.nodelist, "127.0.0.[2-5]");
  EXPECT_EQ(p.tasks_per_node, "1(x4)");
}

TEST(PlanStep, DefaultNtasksSpreadInBlocks) {
  StepPlan p = SrunPlan({}, 10);
  EXPECT_EQ(p.ntasks, 10);
  EXPECT_EQ(p.nodes, (std::vector<StepNodePlan>{
                         {1, 3, 0}, {2, 3, 3}, {0, 2, 6}, {3, 2, 8}}));
  EXPECT_EQ(p.tasks_per_node, "3(x2),2(x2)");
  // A default below the node count: one task per node.
  EXPECT_EQ(SrunPlan({}, 2).ntasks, 4);
}

TEST(PlanStep, NodesAndTasks) {
  StepPlan p = SrunPlan({"-N", "2"});
  EXPECT_EQ(p.ntasks, 2);
  EXPECT_EQ(p.nodes, (std::vector<StepNodePlan>{{1, 1, 0}, {2, 1, 1}}));
  EXPECT_EQ(p.nodelist, "127.0.0.[2-3]");

  p = SrunPlan({"-n", "1"});
  EXPECT_EQ(p.nodes, (std::vector<StepNodePlan>{{1, 1, 0}}));

  p = SrunPlan({"-n", "5"});
  EXPECT_EQ(p.tasks_per_node, "2,1(x3)");

  p = SrunPlan({"--ntasks-per-node", "2"});
  EXPECT_EQ(p.ntasks, 8);
  EXPECT_EQ(p.tasks_per_node, "2(x4)");

  p = SrunPlan({"-n", "3", "--ntasks-per-node", "2"});
  EXPECT_EQ(p.nodes, (std::vector<StepNodePlan>{{1, 2, 0}, {2, 1, 2}}));

  p = SrunPlan({"-N", "2", "--ntasks-per-node", "2"});
  EXPECT_EQ(p.ntasks, 4);
  EXPECT_EQ(p.tasks_per_node, "2(x2)");
}

TEST(PlanStep, NodelistAndExclude) {
  // -w by name or by host.
  StepPlan p = SrunPlan({"-w", "h200-3,127.0.0.4"});
  EXPECT_EQ(p.nodes, (std::vector<StepNodePlan>{{0, 1, 0}, {3, 1, 1}}));
  EXPECT_EQ(p.nodelist, "127.0.0.[4-5]");
  // -N above -w's count takes more nodes, -w's first.
  p = SrunPlan({"-w", "h200-3", "-N", "2"});
  EXPECT_EQ(p.nodes, (std::vector<StepNodePlan>{{3, 1, 0}, {1, 1, 1}}));
  p = SrunPlan({"-x", "h200-[0-1]"});
  EXPECT_EQ(p.nodes, (std::vector<StepNodePlan>{{0, 1, 0}, {3, 1, 1}}));
}

TEST(PlanStep, Errors) {
  EXPECT_EQ(SrunPlanError({"-N", "5"}),
            "the step asks for 5 nodes; the job has 4");
  EXPECT_EQ(SrunPlanError({"-x", "h200-0", "-N", "4"}),
            "the step asks for 4 nodes; the job has 3 that it may use");
  EXPECT_EQ(SrunPlanError({"-w", "h200-9"}),
            "-w/--nodelist: \"h200-9\" is not one of the job's nodes");
  EXPECT_EQ(SrunPlanError({"-x", "nope"}),
            "-x/--exclude: \"nope\" is not one of the job's nodes");
  EXPECT_EQ(SrunPlanError({"-w", "h200-0", "-x", "127.0.0.2"}),
            "node h200-0 is both in -w and in -x");
  EXPECT_EQ(SrunPlanError({"-w", "h200-[0-2]", "-N", "2"}),
            "-N 2 is fewer than the 3 nodes -w names");
  EXPECT_EQ(SrunPlanError({"-N", "3", "-n", "2"}),
            "2 tasks cannot cover 3 nodes: every node of a step runs a task");
  EXPECT_EQ(SrunPlanError({"-N", "2", "-n", "5", "--ntasks-per-node", "2"}),
            "5 tasks do not fit on 2 nodes at 2 per node");
  absl::StatusOr<StepPlan> none = PlanStep(SrunOptions{}, {}, 1);
  EXPECT_FALSE(none.ok());
}

TEST(FormatTasksPerNode, Compresses) {
  EXPECT_EQ(FormatTasksPerNode({2, 2, 2, 1}), "2(x3),1");
  EXPECT_EQ(FormatTasksPerNode({1}), "1");
  EXPECT_EQ(FormatTasksPerNode({1, 2, 1}), "1,2,1");
  EXPECT_EQ(FormatTasksPerNode({}), "");
}

}  // namespace
}  // namespace loom
