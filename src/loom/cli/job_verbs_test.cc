#include "loom/cli/job_verbs.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/cli/cli_test_util.h"
#include "loom/cli/job_format.h"
#include "loom/cli/job_output.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

TEST_F(VerbTest, QueuePrintsActiveJobsByDefault) {
  CliResult r = Run({"queue"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, FormatJobTable(SampleJobs(), false, kNow));
  EXPECT_EQ(list_query_, "held,pending,running,stopping");
  r = Run({"queue", "--all", "-o", "json"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(list_query_, "");
  EXPECT_EQ(Json::parse(r.out), SampleJobs());
  r = Run({"queue", "--state", "failed,Succeeded", "-o", "yaml"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(list_query_, "failed,succeeded");
  EXPECT_THAT(r.out, HasSubstr("jobs:\n  - "));
}

// As kubectl: the client verbs' common options before the verb too.
TEST_F(VerbTest, CommonOptionsGoBeforeTheVerbToo) {
  const std::string url = env_["LOOM_SERVER"];
  env_["LOOM_SERVER"] = "http://127.0.0.1:1";  // nothing there
  CliResult r = Run({"--server", url, "-o", "json", "queue"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out), SampleJobs());
  // After the verb, they win.
  r = Run({"--server", "http://127.0.0.1:1", "queue", "--server", url});
  EXPECT_EQ(r.rc, 0) << r.err;
  r = Run({"-o", "json", "cancel", "42", "--server", url});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("-o: this verb prints no structured output"));
  EXPECT_EQ(Run({"-o", "xml", "queue"}).rc, 2);
}

TEST_F(VerbTest, QueueRejectsBadUsage) {
  CliResult r = Run({"queue", "--state", "sleeping"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown state 'sleeping'"));
  EXPECT_EQ(Run({"queue", "-o", "xml"}).rc, 2);
  EXPECT_EQ(Run({"queue", "--all", "--state", "held"}).rc, 2);
}

TEST_F(VerbTest, SubmitParsesLocallyThenSends) {
  const std::string path = TempFile(
      "job.yaml",
      "name: train\nresources:\n  gpus: 8\ncommand: [python, train.py]\n");
  CliResult r = Run({"submit", "-f", path, "--hold"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "submitted job 42 (held; start it with `loom release 42`)\n");
  EXPECT_EQ(submitted_["name"], "train");
  EXPECT_EQ(submitted_["hold"], true);
  EXPECT_EQ(submitted_["resources"]["gpus"], 8);
  EXPECT_EQ(submit_user_, "carol");
}

TEST_F(VerbTest, SubmitSeveralFilesChecksAllFirst) {
  const std::string a = TempFile("a.yaml", "name: a\ncommand: [x]\n");
  const std::string b = TempFile("b.yaml", "name: b\ncommand: [y]\n");
  const std::string bad = TempFile("c.yaml", "name: c\ncommand: 3\ntasks: 0\n");
  CliResult r = Run({"submit", "-f", a, b});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "submitted job 42\nsubmitted job 42\n");
  EXPECT_EQ(submitted_["name"], "b");  // the last one sent
  submitted_ = Json();
  r = Run({"submit", "-f", a, "-f", bad, "-f", b});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr(bad + ":3:"));
  EXPECT_TRUE(submitted_.is_null());  // nothing was sent
  r = Run({"submit", "-f", a, b, "-o", "json"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out)["jobs"].size(), 2u);
}

TEST_F(VerbTest, SubmitBadFileIsExit2WithLocation) {
  const std::string path = TempFile("bad.yaml",
                                    "name: train\nresources:\n  gpus: many\n"
                                    "command: [x]\n");
  CliResult r = Run({"submit", "-f", path});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr(path + ":3:"));
  EXPECT_THAT(r.err, HasSubstr("resources.gpus"));
  EXPECT_TRUE(submitted_.is_null());

  r = Run({"submit", "-f", "/nonexistent/job.yaml"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot read /nonexistent/job.yaml"));
}

TEST_F(VerbTest, RunSubmitsTheBuiltSpec) {
  CliResult r = Run({"run", "-g", "16", "--nodes", "2", "--procs-per-node", "8",
                     "--", "torchrun", "train.py", "--lr", "3"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "submitted job 42\n");
  EXPECT_EQ(submitted_["resources"]["nodes"], 2);
  EXPECT_EQ(submitted_["resources"]["processes_per_task"], 8);
  EXPECT_EQ(submitted_["command"],
            Json::array({"torchrun", "train.py", "--lr", "3"}));
  // Without "--", flags after the command's first word are the command's.
  r = Run({"run", "-g", "1", "python", "x.py", "-g", "2"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(submitted_["command"], Json::array({"python", "x.py", "-g", "2"}));
  EXPECT_EQ(submitted_["resources"]["gpus"], 1);
}

TEST_F(VerbTest, RunWithAnImageSendsTheContainer) {
  CliResult r = Run({"run", "-g", "1", "--image", "localhost:5000/team/t:1",
                     "--mount", "/data:/data:ro", "--mount", "/s:/s",
                     "--shm-size", "1Gi", "python", "t.py"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(submitted_["container"]["image"], "localhost:5000/team/t:1");
  EXPECT_EQ(submitted_["container"]["mounts"],
            Json::array({"/data:/data:ro", "/s:/s"}));
  EXPECT_EQ(submitted_["container"]["shm_size"], "1Gi");
  EXPECT_EQ(submitted_["command"], Json::array({"python", "t.py"}));
  r = Run({"run", "-g", "1", "--mount", "/d:/d", "--", "x"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--mount: only applies with --image"));
}

TEST_F(VerbTest, RunBadFlagsAreExit2) {
  CliResult r = Run({"run", "-g", "12", "--nodes", "5", "--", "x"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("loom run: -g 12 GPUs cannot be spread"));
  EXPECT_EQ(Run({"run", "--", "x"}).rc, 2);  // -g is required
  EXPECT_EQ(Run({"run", "-g", "2"}).rc, 2);  // no command
  EXPECT_TRUE(submitted_.is_null());
}

TEST_F(VerbTest, RunWaitExitsWithTheJobsCode) {
  states_ = {{{"id", 42}, {"state", "pending"}, {"reason", "no free GPUs"}},
             {{"id", 42},
              {"state", "running"},
              {"placement", {{"tasks", {{{"node", "h200-0"}}}}}}},
             {{"id", 42}, {"state", "failed"}, {"exit_code", 3}}};
  CliResult r = Run({"run", "-g", "2", "--wait", "--", "false"});
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_EQ(r.out, "submitted job 42\n");
  EXPECT_THAT(r.err, HasSubstr("job 42 is pending: no free GPUs\n"));
  EXPECT_THAT(r.err, HasSubstr("job 42 is running on h200-0\n"));
  EXPECT_THAT(r.err, HasSubstr("job 42 failed (exit status 3)"));

  polls_ = 0;
  states_ = {{{"id", 42}, {"state", "succeeded"}, {"exit_code", 0}}};
  EXPECT_EQ(Run({"run", "-g", "2", "--wait", "--", "true"}).rc, 0);
}

// As srun: Ctrl-C cancels the job, and the wait goes on to its end.
TEST_F(VerbTest, RunWaitInterruptedCancelsTheJob) {
  std::atomic<bool> interrupted{false};
  std::thread ctrl_c([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    interrupted = true;
  });
  CliResult r =
      Run({"run", "-g", "1", "--wait", "--", "sleep", "1000"}, &interrupted);
  ctrl_c.join();
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("loom run: cancelling job 42"));
  EXPECT_THAT(r.err, HasSubstr("job 42 cancelled"));
}

// `loom attach`: Ctrl-C leaves, the job keeps running.
TEST_F(VerbTest, AttachInterruptedDetaches) {
  std::atomic<bool> interrupted{false};
  std::thread ctrl_c([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    interrupted = true;
  });
  CliResult r = Run({"attach", "42"}, &interrupted);
  ctrl_c.join();
  EXPECT_EQ(r.rc, 130);
  EXPECT_THAT(r.err, HasSubstr("detached; job 42 keeps running"));
  EXPECT_EQ(Run({"attach", "9"}).rc, 1);
}

// Every task's stdout and stderr, each line led by its rank with -l.
TEST_F(VerbTest, RunWaitStreamsEveryTasksOutputWithRanks) {
  const Json tasks = {
      {{"index", 0}, {"task_id", "42.0.0"}, {"state", "running"}},
      {{"index", 1}, {"task_id", "42.0.1"}, {"state", "running"}}};
  states_ = {
      {{"id", 42}, {"state", "running"}, {"placement", {{"tasks", tasks}}}},
      {{"id", 42},
       {"state", "succeeded"},
       {"exit_code", 0},
       {"placement", {{"tasks", tasks}}}}};
  CliResult r = Run({"run", "-g", "16", "--nodes", "2", "--wait", "-l", "--",
                     "python", "train.py"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("0: line from stdout of task 0\n"));
  EXPECT_THAT(r.out, HasSubstr("1: line from stdout of task 1\n"));
  EXPECT_THAT(r.err, HasSubstr("0: line from stderr of task 0\n"));
  EXPECT_THAT(r.err, HasSubstr("1: line from stderr of task 1\n"));
  // Each stream once, though the job was seen twice.
  EXPECT_EQ(r.out.find("task 1\n"), r.out.rfind("task 1\n"));
  // Without -l, the lines as the tasks wrote them.
  polls_ = 0;
  r = Run({"attach", "42"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("line from stdout of task 1\n"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr(": line")));
}

TEST(LinePrefixer, WholeLinesOnlyEachLedByThePrefix) {
  LinePrefixer p("3: ");
  EXPECT_EQ(p.Feed("a\nb"), "3: a\n");
  EXPECT_EQ(p.Feed("c\n\nd"), "3: bc\n3: \n");
  EXPECT_EQ(p.Feed(""), "");
  EXPECT_EQ(p.Flush(), "3: d\n");
  EXPECT_EQ(p.Flush(), "");
  LinePrefixer none("");
  EXPECT_EQ(none.Feed("x\ny"), "x\n");
}

TEST_F(VerbTest, ShowAndLogs) {
  states_ = {SampleJobs()["jobs"][0]};
  states_[0]["id"] = 42;
  CliResult r = Run({"show", "42"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Job:        42 (retriever-ft)"));
  r = Run({"show", "9"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "loom show: no job 9\n");
  EXPECT_EQ(Run({"show", "abc"}).rc, 2);

  r = Run({"logs", "42", "--task", "3", "--stderr"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "line from stderr of task 3\n");
}

// Issue 14.7: CLI11 read "0x10" as job 16, "010" as 8 and clamped 2^64-1
// to 2^63-1; job IDs are canonical positive decimals.
TEST_F(VerbTest, JobIdsAreCanonicalDecimals) {
  for (const char* bad : {"0x10", "010", "+5", "18446744073709551615"}) {
    CliResult r = Run({"show", bad});
    EXPECT_EQ(r.rc, 2) << bad << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(bad));
  }
  EXPECT_THAT(Run({"show", "18446744073709551615"}).err,
              HasSubstr("out of range"));
  EXPECT_EQ(Run({"cancel", "41", "0x2b"}).rc, 2);
  EXPECT_EQ(Run({"logs", "0042"}).rc, 2);
  EXPECT_EQ(Run({"show", "42"}).rc, 0);
}

// Any non-2xx answer to a log read is an error: its message is printed, not
// the body as log text, and the verb exits 1 (issue 14.6).
TEST_F(VerbTest, LogsPrintsTheErrorOfAnyNon2xxAnswerAndExits1) {
  CliResult r = Run({"logs", "13"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "loom logs: job 13: the agent of node h200-1 did not answer: "
            "Connection refused\n");
  r = Run({"logs", "14", "-f"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("HTTP 504"));
  EXPECT_THAT(r.err, HasSubstr("agent timed out"));
  r = Run({"logs", "15", "--task", "3"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "loom logs: job 15: task 3 has not started\n");
}

TEST_F(VerbTest, CancelReportsEachJob) {
  CliResult r = Run({"cancel", "41", "7", "43"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.out, HasSubstr("cancelled job 41\n"));
  EXPECT_THAT(r.out, HasSubstr("job 43 is stopping"));
  EXPECT_EQ(r.err, "loom cancel: no job 7\n");
}

TEST_F(VerbTest, ReleaseAllReleasesMyHeldJobs) {
  CliResult r = Run({"release", "--all"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "released job 5\nreleased job 6\n");
  EXPECT_EQ(released_, (std::vector<int>{5, 6}));
  EXPECT_EQ(Run({"release"}).rc, 2);
  EXPECT_EQ(Run({"release", "5", "--all"}).rc, 2);
  // Several IDs: one request; a job that cannot be released fails the verb.
  released_.clear();
  r = Run({"release", "8", "7", "9"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "released job 8\nreleased job 9\n");
  EXPECT_THAT(r.err, HasSubstr("job 7 is running, not held"));
  EXPECT_EQ(released_, (std::vector<int>{8, 9}));
}

TEST_F(VerbTest, CheckpointUsesTheTasksJob) {
  CliResult r = Run({"checkpoint"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("LOOM_JOB_ID"));
  env_["LOOM_JOB_ID"] = "17";
  r = Run({"checkpoint", "--step", "40"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "job 17: checkpoint recorded (step 40)\n");
  EXPECT_EQ(checkpoint_["id"], 17);
  EXPECT_EQ(checkpoint_["body"]["step"], 40);
  r = Run({"checkpoint", "5"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(checkpoint_["id"], 5);
  EXPECT_FALSE(checkpoint_["body"].contains("step"));
}

}  // namespace
}  // namespace loom
