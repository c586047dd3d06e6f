// Tests of `#SBATCH` directive and `sbatch` argument parsing, merging and
// output pattern expansion (sbatch_script.h).

#include "loom/core/sbatch_script.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::SizeIs;

SbatchScript SbatchParse(std::string_view text) {
  absl::StatusOr<SbatchScript> script = ParseSbatchScript(text);
  EXPECT_TRUE(script.ok()) << text << "\n" << script.status();
  return script.ok() ? *script : SbatchScript{};
}

std::string SbatchParseError(std::string_view text) {
  absl::StatusOr<SbatchScript> script = ParseSbatchScript(text);
  EXPECT_FALSE(script.ok()) << text;
  EXPECT_EQ(script.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(script.status().message());
}

// One directive in a minimal script.
SbatchOptions SbatchOne(std::string_view directive) {
  return SbatchParse(absl::StrCat("#!/bin/bash\n#SBATCH ",
                                  std::string(directive), "\necho hi\n"))
      .options;
}

std::string SbatchOneError(std::string_view directive) {
  return SbatchParseError(
      absl::StrCat("#!/bin/bash\n#SBATCH ", std::string(directive), "\n"));
}

TEST(ParseSbatchScript, TypicalScript) {
  const SbatchScript script = SbatchParse(R"(#!/bin/bash
# A training job.
#SBATCH --job-name=train
#SBATCH -N 2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=h100:8
#SBATCH -c 12
#SBATCH --mem=500G
#SBATCH -t 1-12:00:00
#SBATCH -p gpu
#SBATCH -A ml --qos high

#SBATCH -o logs/%x-%j.out
#SBATCH --error logs/%x-%j.err
srun python train.py
)");
  const SbatchOptions& o = script.options;
  EXPECT_EQ(o.job_name, "train");
  EXPECT_EQ(o.nodes, 2);
  EXPECT_EQ(o.nodes_max, std::nullopt);
  EXPECT_EQ(o.ntasks_per_node, 8);
  EXPECT_EQ(o.gpus_per_node, (SbatchGpus{"h100", 8}));
  EXPECT_EQ(o.cpus_per_task, 12);
  EXPECT_EQ(o.mem_bytes, int64_t{500} << 30);
  EXPECT_EQ(o.time_limit_seconds, 36 * 3600);
  EXPECT_EQ(o.partition, "gpu");
  EXPECT_EQ(o.account, "ml");
  EXPECT_EQ(o.qos, "high");
  EXPECT_EQ(o.output, "logs/%x-%j.out");
  EXPECT_EQ(o.error, "logs/%x-%j.err");
  EXPECT_EQ(o.ntasks, std::nullopt);
  EXPECT_EQ(o.hold, std::nullopt);
  EXPECT_THAT(script.warnings, IsEmpty());
}

TEST(ParseSbatchScript, StopsAtFirstCommand) {
  const SbatchScript script = SbatchParse(
      "#!/bin/sh\n#SBATCH -J a\n\n   # indented comment\nhostname\n"
      "#SBATCH -J b\n#SBATCH --bogus\n");
  EXPECT_EQ(script.options.job_name, "a");
  EXPECT_THAT(script.warnings,
              ElementsAre(HasSubstr("line 6: #SBATCH after the first command"),
                          HasSubstr("line 7:")));
}

TEST(ParseSbatchScript, OnlyExactSbatchPrefixIsADirective) {
  const SbatchScript script =
      SbatchParse("#!/bin/bash\n# SBATCH -J x\n#SBATCHX -J y\n #SBATCH -J z\n");
  EXPECT_EQ(script.options.job_name, std::nullopt);
}

TEST(ParseSbatchScript, CrLfLines) {
  EXPECT_EQ(
      SbatchParse("#!/bin/bash\r\n#SBATCH -J w\r\necho\r\n").options.job_name,
      "w");
}

TEST(ParseSbatchScript, EmptyTextHasNoOptions) {
  EXPECT_EQ(SbatchParse("").options, SbatchOptions{});
}

TEST(ParseSbatchScript, OptionForms) {
  EXPECT_EQ(SbatchOne("--job-name=a").job_name, "a");
  EXPECT_EQ(SbatchOne("--job-name a").job_name, "a");
  EXPECT_EQ(SbatchOne("-Ja").job_name, "a");
  EXPECT_EQ(SbatchOne("-J a").job_name, "a");
  EXPECT_EQ(SbatchOne("--job-name=a=b").job_name, "a=b");
}

TEST(ParseSbatchScript, QuotesAndComments) {
  EXPECT_EQ(SbatchOne("-J \"my job\"").job_name, "my job");
  EXPECT_EQ(SbatchOne("-J 'it''s'").job_name, "its");
  EXPECT_EQ(SbatchOne("--job-name=\"a \\\"b\\\"\"").job_name, "a \"b\"");
  EXPECT_EQ(SbatchOne("-J my\\ job").job_name, "my job");
  EXPECT_EQ(SbatchOne("-J a # the name").job_name, "a");
  EXPECT_EQ(SbatchOne("-J a#b").job_name, "a#b");
  EXPECT_EQ(SbatchOne("-J '#x'").job_name, "#x");
  EXPECT_THAT(SbatchOneError("-J \"open"), HasSubstr("line 2: unclosed quote"));
}

TEST(ParseSbatchScript, SeveralOptionsOnALine) {
  const SbatchOptions o = SbatchOne("-N 2 -n 16 --exclusive");
  EXPECT_EQ(o.nodes, 2);
  EXPECT_EQ(o.ntasks, 16);
  EXPECT_EQ(o.exclusive, true);
}

TEST(ParseSbatchScript, LastRepeatedOptionWins) {
  EXPECT_EQ(SbatchParse("#SBATCH -N 2\n#SBATCH --nodes=3\n").options.nodes, 3);
  const SbatchOptions o = SbatchParse("#SBATCH -N 2-4\n#SBATCH -N 3\n").options;
  EXPECT_EQ(o.nodes, 3);
  EXPECT_EQ(o.nodes_max, std::nullopt);
}

TEST(ParseSbatchScript, Counts) {
  EXPECT_EQ(SbatchOne("-N 1-4").nodes, 1);
  EXPECT_EQ(SbatchOne("-N 1-4").nodes_max, 4);
  EXPECT_EQ(SbatchOne("-n 64").ntasks, 64);
  EXPECT_EQ(SbatchOne("--cpus-per-task=4").cpus_per_task, 4);
  EXPECT_THAT(SbatchOneError("-N 4-1"), HasSubstr("MIN is above MAX"));
  EXPECT_THAT(SbatchOneError("--ntasks=0"), HasSubstr("must be positive"));
  EXPECT_THAT(SbatchOneError("-n -3"), HasSubstr("not a number"));
  EXPECT_THAT(SbatchOneError("-n 99999999999"), HasSubstr("too large"));
  EXPECT_THAT(SbatchOneError("-c 1.5"), HasSubstr("not a number"));
}

TEST(ParseSbatchScript, ErrorNamesLineOptionAndValue) {
  EXPECT_EQ(SbatchParseError("#!/bin/bash\n#\n\n#SBATCH --gpus-per-node=x\n"),
            "line 4: --gpus-per-node: \"x\" is not a number");
  EXPECT_EQ(SbatchOneError("-N x"),
            "line 2: -N/--nodes: \"x\" is not a number");
}

TEST(ParseSbatchScript, Gpus) {
  EXPECT_EQ(SbatchOne("-G 4").gpus, (SbatchGpus{"", 4}));
  EXPECT_EQ(SbatchOne("--gpus=a100:2").gpus, (SbatchGpus{"a100", 2}));
  EXPECT_EQ(SbatchOne("--gpus-per-task=1").gpus_per_task, (SbatchGpus{"", 1}));
  EXPECT_THAT(SbatchOneError("--gpus=:2"), HasSubstr("[type:]count"));
  EXPECT_THAT(SbatchOneError("--gpus=a:b:2"), HasSubstr("[type:]count"));
  EXPECT_THAT(SbatchOneError("--gpus=a100:"), HasSubstr("not a number"));
}

TEST(ParseSbatchScript, Gres) {
  EXPECT_EQ(SbatchOne("--gres=gpu:4").gpus_per_node, (SbatchGpus{"", 4}));
  EXPECT_EQ(SbatchOne("--gres=gpu:h100:8").gpus_per_node,
            (SbatchGpus{"h100", 8}));
  EXPECT_EQ(SbatchOne("--gres=gpu").gpus_per_node, (SbatchGpus{"", 1}));
  EXPECT_EQ(SbatchOne("--gres=gpu:h100").gpus_per_node,
            (SbatchGpus{"h100", 1}));
  EXPECT_THAT(SbatchOneError("--gres=mps:100"), HasSubstr("only gpu"));
  EXPECT_THAT(SbatchOneError("--gres=gpus:1"), HasSubstr("only gpu"));
  EXPECT_THAT(SbatchOneError("--gres=gpu:1,mps:2"), HasSubstr("only one gres"));
  EXPECT_THAT(SbatchOneError("--gres=gpu:"), HasSubstr("gpu[:type]:count"));
  EXPECT_THAT(SbatchOneError("--gres=gpu:h100:0"), HasSubstr("--gres"));
}

TEST(ParseSbatchMemory, Units) {
  EXPECT_EQ(*ParseSbatchMemory("100"), int64_t{100} << 20);
  EXPECT_EQ(*ParseSbatchMemory("512K"), int64_t{512} << 10);
  EXPECT_EQ(*ParseSbatchMemory("4m"), int64_t{4} << 20);
  EXPECT_EQ(*ParseSbatchMemory("16G"), int64_t{16} << 30);
  EXPECT_EQ(*ParseSbatchMemory("2T"), int64_t{2} << 40);
  EXPECT_EQ(*ParseSbatchMemory("0"), 0);
  // Slurm's units are one letter: "16GB" is not 16G.
  EXPECT_THAT(ParseSbatchMemory("16GB").status().message(),
              HasSubstr("unknown unit"));
  EXPECT_THAT(ParseSbatchMemory("1x5").status().message(),
              HasSubstr("not a memory size"));
  EXPECT_THAT(ParseSbatchMemory("16X").status().message(),
              HasSubstr("unknown unit"));
  EXPECT_FALSE(ParseSbatchMemory("").ok());
  EXPECT_FALSE(ParseSbatchMemory("G").ok());
  EXPECT_FALSE(ParseSbatchMemory("1.5G").ok());
  EXPECT_FALSE(ParseSbatchMemory("-1").ok());
  EXPECT_THAT(ParseSbatchMemory("99999999999T").status().message(),
              HasSubstr("too large"));
  EXPECT_THAT(SbatchOneError("--mem=lots"),
              HasSubstr("line 2: --mem: \"lots\""));
}

TEST(ParseSbatchTime, Formats) {
  EXPECT_EQ(*ParseSbatchTime("90"), 90 * 60);
  EXPECT_EQ(*ParseSbatchTime("10:30"), 10 * 60 + 30);
  EXPECT_EQ(*ParseSbatchTime("2:00:05"), 2 * 3600 + 5);
  EXPECT_EQ(*ParseSbatchTime("1-2"), 26 * 3600);
  EXPECT_EQ(*ParseSbatchTime("1-2:30"), 26 * 3600 + 30 * 60);
  EXPECT_EQ(*ParseSbatchTime("1-02:30:15"), 26 * 3600 + 30 * 60 + 15);
  EXPECT_EQ(*ParseSbatchTime("0"), 0);
  EXPECT_EQ(*ParseSbatchTime("UNLIMITED"), 0);
  EXPECT_EQ(*ParseSbatchTime("infinite"), 0);
}

TEST(ParseSbatchTime, Rejects) {
  for (const char* bad : {"", "x", "1:2:3:4", "1-", "-1", "1-2:3:4:5", "1::2",
                          "1h", "1.5", "a-1", "1-2-3", ":5"}) {
    EXPECT_FALSE(ParseSbatchTime(bad).ok()) << bad;
  }
  EXPECT_THAT(SbatchOneError("-t 1h"),
              HasSubstr("line 2: -t/--time: \"1h\" is not a time"));
}

TEST(ParseSbatchScript, Strings) {
  const SbatchOptions o =
      SbatchOne("-a 0-9%2 -d afterok:12 -D /scratch -C \"a100&ib\"");
  EXPECT_EQ(o.array, "0-9%2");
  EXPECT_EQ(o.dependency, "afterok:12");
  EXPECT_EQ(o.chdir, "/scratch");
  EXPECT_EQ(o.constraint, "a100&ib");
  EXPECT_THAT(SbatchOneError("--partition="),
              HasSubstr("--partition: the value is empty"));
}

TEST(ParseSbatchScript, Flags) {
  EXPECT_EQ(SbatchOne("--requeue").requeue, true);
  EXPECT_EQ(SbatchOne("--no-requeue").requeue, false);
  EXPECT_EQ(SbatchOne("-H").hold, true);
  EXPECT_EQ(SbatchOne("--hold").hold, true);
  EXPECT_EQ(SbatchOne("--exclusive").exclusive, true);
  EXPECT_THAT(SbatchOneError("--exclusive=user"), HasSubstr("takes no value"));
  EXPECT_THAT(SbatchOneError("-Hx"), HasSubstr("takes no value"));
}

TEST(ParseSbatchScript, KillOnInvalidDepAndParsable) {
  EXPECT_EQ(SbatchOne("--kill-on-invalid-dep=yes").kill_on_invalid_dep, true);
  EXPECT_EQ(SbatchOne("--kill-on-invalid-dep no").kill_on_invalid_dep, false);
  EXPECT_EQ(SbatchOne("-J x").kill_on_invalid_dep, std::nullopt);
  EXPECT_EQ(SbatchOneError("--kill-on-invalid-dep=maybe"),
            "line 2: --kill-on-invalid-dep: \"maybe\" is not yes or no");
  EXPECT_THAT(SbatchOneError("--kill-on-invalid-dep"),
              HasSubstr("--kill-on-invalid-dep needs a value"));
  EXPECT_EQ(SbatchOne("--parsable").parsable, true);
  EXPECT_EQ(SbatchOne("-J x").parsable, std::nullopt);
  EXPECT_THAT(SbatchOneError("--parsable=yes"), HasSubstr("takes no value"));
  absl::StatusOr<SbatchCommandLine> cl =
      ParseSbatchArgs({"--parsable", "--kill-on-invalid-dep", "yes", "a.sh"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->options.parsable, true);
  EXPECT_EQ(cl->options.kill_on_invalid_dep, true);
  EXPECT_THAT(cl->script_and_args, ElementsAre("a.sh"));
}

TEST(ParseSbatchScript, Signal) {
  EXPECT_EQ(SbatchOne("--signal=USR1").signal, (SbatchSignal{false, 10, 60}));
  EXPECT_EQ(SbatchOne("--signal=B:SIGTERM@120").signal,
            (SbatchSignal{true, 15, 120}));
  EXPECT_EQ(SbatchOne("--signal=12@0").signal, (SbatchSignal{false, 12, 0}));
  EXPECT_EQ(SbatchOne("--signal=sigusr2").signal,
            (SbatchSignal{false, 12, 60}));
  EXPECT_THAT(SbatchOneError("--signal=FOO"), HasSubstr("known signal"));
  EXPECT_THAT(SbatchOneError("--signal=99"), HasSubstr("1 to 64"));
  EXPECT_THAT(SbatchOneError("--signal=USR1@x"), HasSubstr("after '@'"));
  EXPECT_THAT(SbatchOneError("--signal=R:USR1"), HasSubstr("--signal"));
}

TEST(ParseSbatchScript, Export) {
  EXPECT_EQ(SbatchOne("--export=ALL").export_env, (SbatchExport{true, {}}));
  EXPECT_EQ(SbatchOne("--export=NONE").export_env, (SbatchExport{false, {}}));
  const SbatchOptions o = SbatchOne("--export=ALL,A=1,B,C=x=y,D=");
  ASSERT_TRUE(o.export_env.has_value());
  EXPECT_TRUE(o.export_env->all);
  EXPECT_THAT(o.export_env->variables,
              ElementsAre(Pair("A", "1"), Pair("B", std::nullopt),
                          Pair("C", "x=y"), Pair("D", "")));
  EXPECT_FALSE(SbatchOne("--export=PATH").export_env->all);
  EXPECT_THAT(SbatchOneError("--export=1X"), HasSubstr("NAME[=VALUE]"));
  EXPECT_THAT(SbatchOneError("--export=A,,B"), HasSubstr("NAME[=VALUE]"));
}

TEST(ParseSbatchScript, UnknownOptionIsAnError) {
  EXPECT_EQ(SbatchOneError("--frobnicate=3"),
            "line 2: unknown option \"--frobnicate=3\"");
  EXPECT_THAT(SbatchOneError("-Z"), HasSubstr("unknown option \"-Z\""));
  EXPECT_THAT(SbatchOneError("--nice=5"), HasSubstr("unknown option"));
  // No getopt abbreviations.
  EXPECT_THAT(SbatchOneError("--job=x"), HasSubstr("unknown option"));
  EXPECT_THAT(SbatchOneError("stray"), HasSubstr("\"stray\" is not an option"));
  EXPECT_THAT(SbatchOneError("--time"), HasSubstr("--time needs a value"));
}

TEST(ParseSbatchScript, HarmlessOptionsWarn) {
  const SbatchScript script = SbatchParse(
      "#!/bin/bash\n#SBATCH --mail-type=END\n#SBATCH --mail-user me@x "
      "-J j\n#SBATCH --comment=\"hi there\" --open-mode=append\n");
  EXPECT_EQ(script.options.job_name, "j");
  EXPECT_THAT(script.warnings,
              ElementsAre(HasSubstr("line 2: --mail-type is accepted and "
                                    "ignored"),
                          HasSubstr("line 3: --mail-user"),
                          HasSubstr("line 4: --comment"),
                          HasSubstr("line 4: --open-mode")));
}

TEST(ParseSbatchArgs, OptionsThenScript) {
  absl::StatusOr<SbatchCommandLine> cl = ParseSbatchArgs(
      {"-N", "4", "--time=30", "--mail-type=ALL", "job.sh", "-N", "x"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->options.nodes, 4);
  EXPECT_EQ(cl->options.time_limit_seconds, 30 * 60);
  EXPECT_THAT(cl->script_and_args, ElementsAre("job.sh", "-N", "x"));
  EXPECT_THAT(cl->warnings, ElementsAre(HasSubstr("argument 4: --mail-type")));
}

TEST(ParseSbatchArgs, DashDashAndNoScript) {
  absl::StatusOr<SbatchCommandLine> cl =
      ParseSbatchArgs({"-J", "x", "--", "-weird.sh"});
  ASSERT_TRUE(cl.ok());
  EXPECT_THAT(cl->script_and_args, ElementsAre("-weird.sh"));
  cl = ParseSbatchArgs({"--hold"});
  ASSERT_TRUE(cl.ok());
  EXPECT_EQ(cl->options.hold, true);
  EXPECT_THAT(cl->script_and_args, IsEmpty());
  cl = ParseSbatchArgs({});
  ASSERT_TRUE(cl.ok());
  EXPECT_EQ(cl->options, SbatchOptions{});
}

TEST(ParseSbatchArgs, ErrorsNameTheArgument) {
  EXPECT_EQ(
      std::string(
          ParseSbatchArgs({"-J", "a", "--nodes", "x"}).status().message()),
      "argument 3: --nodes: \"x\" is not a number");
  EXPECT_EQ(std::string(ParseSbatchArgs({"--bogus"}).status().message()),
            "argument 1: unknown option \"--bogus\"");
}

TEST(Merge, CommandLineWinsPerOption) {
  SbatchOptions directives = SbatchOne("-J script -N 2-4 -t 60 -p a --requeue");
  absl::StatusOr<SbatchCommandLine> cl =
      ParseSbatchArgs({"-p", "b", "--no-requeue", "-N", "8"});
  ASSERT_TRUE(cl.ok());
  const SbatchOptions m = Merge(directives, cl->options);
  EXPECT_EQ(m.job_name, "script");
  EXPECT_EQ(m.time_limit_seconds, 3600);
  EXPECT_EQ(m.partition, "b");
  EXPECT_EQ(m.requeue, false);
  EXPECT_EQ(m.nodes, 8);
  EXPECT_EQ(m.nodes_max, std::nullopt);  // -N 8 replaced all of -N 2-4
  EXPECT_EQ(Merge(directives, SbatchOptions{}), directives);
  EXPECT_EQ(Merge(SbatchOptions{}, directives), directives);
}

TEST(Merge, KillOnInvalidDepAndParsable) {
  const SbatchOptions directives =
      SbatchOne("--kill-on-invalid-dep=yes --parsable");
  SbatchOptions command_line;
  EXPECT_EQ(Merge(directives, command_line).kill_on_invalid_dep, true);
  EXPECT_EQ(Merge(directives, command_line).parsable, true);
  command_line.kill_on_invalid_dep = false;
  EXPECT_EQ(Merge(directives, command_line).kill_on_invalid_dep, false);
  EXPECT_EQ(Merge(SbatchOptions{}, directives).parsable, true);
}

TEST(ExpandOutputPattern, Substitutes) {
  OutputPatternValues v;
  v.job_id = 1234;
  v.job_name = "train";
  v.first_node = "gpu01";
  v.user = "ada";
  v.node_index = 2;
  v.task_id = 7;
  EXPECT_EQ(ExpandOutputPattern("slurm-%j.out", v), "slurm-1234.out");
  EXPECT_EQ(ExpandOutputPattern("%x-%u-%N-%n-%t", v), "train-ada-gpu01-2-7");
  EXPECT_EQ(ExpandOutputPattern("100%%-%j", v), "100%-1234");
  // Not an array: %A is the job id, %a Slurm's NO_VAL.
  EXPECT_EQ(ExpandOutputPattern("%A_%a", v), "1234_4294967294");
  v.array_job_id = 1200;
  v.array_task_id = 7;
  EXPECT_EQ(ExpandOutputPattern("slurm-%A_%a.out", v), "slurm-1200_7.out");
}

TEST(ExpandOutputPattern, ZeroPadding) {
  OutputPatternValues v;
  v.job_id = 42;
  v.array_task_id = 7;
  v.job_name = "x";
  EXPECT_EQ(ExpandOutputPattern("%4a", v), "0007");
  EXPECT_EQ(ExpandOutputPattern("%8j", v), "00000042");
  EXPECT_EQ(ExpandOutputPattern("%1j", v), "42");
  EXPECT_EQ(ExpandOutputPattern("%5x", v), "x");  // ignored for text
}

TEST(ExpandOutputPattern, UnknownAndEscapes) {
  OutputPatternValues v;
  v.job_id = 9;
  EXPECT_EQ(ExpandOutputPattern("%J.%s.%b", v), "%J.%s.%b");
  EXPECT_EQ(ExpandOutputPattern("end%", v), "end%");
  EXPECT_EQ(ExpandOutputPattern("end%3", v), "end%3");
  EXPECT_EQ(ExpandOutputPattern("", v), "");
  EXPECT_EQ(ExpandOutputPattern("a\\%j", v), "a%j");  // backslash: no expansion
}

}  // namespace
}  // namespace loom
