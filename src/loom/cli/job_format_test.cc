#include "loom/cli/job_format.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/cli/cli_test_util.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

TEST(FormatJobTable, AlignsColumns) {
  EXPECT_EQ(
      FormatJobTable(SampleJobs(), false, kNow),
      "JOBID  NAME          USER   PROJECT   STATE    GPUS  NODES  TIME   "
      "REASON\n"
      "41     retriever-ft  alice  search    running  32    4      3m05s  "
      "-\n"
      "42     eval          bob    research  pending  2     1      -      "
      "waiting for 2 free GPUs; 1 free\n");
}

TEST(FormatJobTable, WideAddsPriorityModelAndSubmit) {
  const std::string table = FormatJobTable(SampleJobs(), true, kNow);
  EXPECT_THAT(table, HasSubstr("PRIORITY  GPU_MODEL  SUBMIT   REASON\n"));
  EXPECT_THAT(table, HasSubstr("normal    h200       10m ago  -\n"));
  EXPECT_THAT(table, HasSubstr("low       any        3h ago   waiting"));
}

TEST(FormatJobTable, EmptyListIsTheHeader) {
  EXPECT_EQ(FormatJobTable({{"jobs", Json::array()}}, false, kNow),
            "JOBID  NAME  USER  PROJECT  STATE  GPUS  NODES  TIME  REASON\n");
  EXPECT_EQ(FormatJobTable(Json::array(), false, kNow),
            FormatJobTable({{"jobs", Json::array()}}, false, kNow));
}

TEST(DescribeSwitchSpan, NamesTheLevel) {
  EXPECT_EQ(DescribeSwitchSpan({{"switch_level", 1}, {"switch", "leaf0"}}),
            "one leaf switch (leaf0)");
  EXPECT_EQ(DescribeSwitchSpan(
                {{"switch_level", 2}, {"switch", "spine1"}, {"leaves", 3}}),
            "one spine switch (spine1), 3 leaves");
  EXPECT_EQ(DescribeSwitchSpan({{"switch_level", 3}, {"leaves", 40}}),
            "one core switch, 40 leaves");
  EXPECT_EQ(DescribeSwitchSpan(
                {{"switch_level", 0}, {"tasks", {{{"node", "h200-3"}}}}}),
            "one node (h200-3)");
  EXPECT_EQ(DescribeSwitchSpan(Json::object()), "");
}

TEST(FormatJobDetails, DescribesARunningJob) {
  Json job = SampleJobs()["jobs"][0];
  job["kind"] = "finetune";
  job["preemptible"] = false;
  job["restart_count"] = 1;
  job["placement"] = {{"switch_level", 1},
                      {"switch", "leaf0"},
                      {"nodes", 2},
                      {"leaves", 1},
                      {"tasks",
                       {{{"index", 0},
                         {"node", "h200-0"},
                         {"address", "127.0.0.2"},
                         {"gpus", {0, 1, 2, 3, 4, 5, 6, 7}},
                         {"state", "running"},
                         {"exit_code", nullptr}},
                        {{"index", 1},
                         {"node", "h200-1"},
                         {"address", "127.0.0.3"},
                         {"gpus", {0, 2, 3}},
                         {"state", "running"}}}}};
  job["spec"] = {{"command", {"python", "train.py", "--note", "a b"}},
                 {"time_limit", "12h"}};
  job["events"] = {
      {{"time", Rfc3339(kNow - absl::Minutes(10))}, {"message", "submitted"}},
      {{"time", Rfc3339(kNow - absl::Seconds(185))},
       {"message", "started on 2 nodes under leaf0"}}};
  const std::string text = FormatJobDetails(job, kNow);
  EXPECT_EQ(text,
            "Job:         41 (retriever-ft)\n"
            "State:       running\n"
            "User:        alice\n"
            "Project:     search\n"
            "Kind:        finetune, priority normal, not preemptible\n"
            "GPUs:        32 x h200 (4 tasks x 8 GPUs)\n"
            "Placement:   one leaf switch (leaf0), 2 nodes\n"
            "Command:     python train.py --note 'a b'\n"
            "Time limit:  12h\n"
            "Submitted:   2026-11-29 16:10:00 UTC (10m ago)\n"
            "Started:     2026-11-29 16:16:55 UTC (3m ago), ran 3m05s\n"
            "Restarts:    1\n"
            "Tasks:\n"
            "  TASK  NODE    ADDRESS    GPUS   STATE    EXIT\n"
            "  0     h200-0  127.0.0.2  0-7    running  -\n"
            "  1     h200-1  127.0.0.3  0,2-3  running  -\n"
            "Events:\n"
            "  TIME                     AGE      MESSAGE\n"
            "  2026-11-29 16:10:00 UTC  10m ago  submitted\n"
            "  2026-11-29 16:16:55 UTC  3m ago   started on 2 nodes under "
            "leaf0\n");
  EXPECT_THAT(text, Not(HasSubstr("Exit code")));
}

TEST(FormatJobDetails, PastRunsSayWhereTheyRanAndHowToReadThem) {
  Json job = SampleJobs()["jobs"][0];
  job["restart_count"] = 2;
  job["restarts_used"] = 2;
  job["past_runs"] = {{{"run", 0}, {"nodes", {"h200-0", "h200-1"}}},
                      {{"run", 1}, {"nodes", {"h200-3"}}}};
  EXPECT_THAT(FormatJobDetails(job, kNow),
              HasSubstr("\nPast runs:  0 on h200-[0-1]; 1 on h200-3 (loom logs "
                        "41 --run N)\n"));
  job["past_runs"] = Json::array();
  EXPECT_THAT(FormatJobDetails(job, kNow), Not(HasSubstr("Past runs")));
}

TEST(FormatJobDetails, AJobInAnImageShowsItsReferenceAndDigest) {
  Json job = SampleJobs()["jobs"][0];
  job["spec"] = {{"command", {"python", "t.py"}},
                 {"container",
                  {{"image", "localhost:5000/team/train:1.4"},
                   {"image_digest", "sha256:" + std::string(64, 'a')},
                   {"mounts", {"/data:/data:ro", "/s:/s"}}}}};
  const std::string text = FormatJobDetails(job, kNow);
  EXPECT_THAT(text, HasSubstr("Image:      localhost:5000/team/train:1.4\n"
                              "Digest:     sha256:aaaa"));
  EXPECT_THAT(text, HasSubstr("Mounts:     /data:/data:ro, /s:/s\n"));
  job["spec"]["container"].erase("image_digest");
  EXPECT_THAT(FormatJobDetails(job, kNow),
              HasSubstr("Digest:     - (not resolved)\n"));
}

TEST(FormatJobDetails, CoalescedEventsShowTheirCount) {
  Json job = SampleJobs()["jobs"][0];
  job["events"] = {{{"time", Rfc3339(kNow - absl::Minutes(10))},
                    {"message", "checkpoint saved (step 900)"},
                    {"count", 12},
                    {"last_time", Rfc3339(kNow - absl::Minutes(1))}}};
  EXPECT_THAT(FormatJobDetails(job, kNow),
              HasSubstr("checkpoint saved (step 900) (12 times, the last 1m "
                        "ago)\n"));
}

TEST(FormatJobDetails, DependencyIsShown) {
  Json job = SampleJobs()["jobs"][1];
  EXPECT_THAT(FormatJobDetails(job, kNow), Not(HasSubstr("Dependency")));
  job["dependency"] = "afterok:12";
  job["reason"] = "waiting for job 12 (running) to succeed";
  const std::string text = FormatJobDetails(job, kNow);
  EXPECT_THAT(text, HasSubstr("Dependency:      afterok:12\n"));
  EXPECT_THAT(text, HasSubstr("Pending reason:  waiting for job 12 (running) "
                              "to succeed\n"));
}

TEST(FormatJobDetails, PendingJobShowsWhyAndFinishedItsCode) {
  const Json pending = SampleJobs()["jobs"][1];
  EXPECT_THAT(FormatJobDetails(pending, kNow),
              HasSubstr("Pending reason:  waiting for 2 free GPUs; 1 free\n"));
  Json failed = pending;
  failed["state"] = "failed";
  failed["reason"] = "task 0 exited with 3";
  failed["exit_code"] = 3;
  const std::string text = FormatJobDetails(failed, kNow);
  EXPECT_THAT(text, HasSubstr("Reason:     task 0 exited with 3\n"));
  EXPECT_THAT(text, HasSubstr("Exit code:  3\n"));
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

TEST(FormatJobDetails, ATaskOnPartOfAGpuNamesItsSlice) {
  Json job = {{"id", 9}, {"name", "eval"}, {"state", "running"}};
  job["placement"] = {
      {"nodes", 1},
      {"tasks",
       {{{"index", 0},
         {"node", "h200-0"},
         {"gpus", {0}},
         {"slice", {{"mig", "1g.18gb"}, {"profile", 0}, {"start", 2}}},
         {"state", "running"}},
        {{"index", 1},
         {"node", "h200-0"},
         {"gpus", {3}},
         {"slice", {{"share_bytes", int64_t{20} << 30}}},
         {"state", "running"}}}}};
  const std::string text = FormatJobDetails(job, absl::UnixEpoch());
  EXPECT_NE(text.find("0 (MIG 1g.18gb@2)"), std::string::npos) << text;
  EXPECT_NE(text.find("3 (shared, 20Gi)"), std::string::npos) << text;
}

}  // namespace
}  // namespace loom
