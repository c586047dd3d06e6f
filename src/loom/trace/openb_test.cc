// The Alibaba openb pod list's sharing pods, CPU, memory and `gpu_spec`
// (docs/trace-formats.md), and its node list (node_list.h), on fixtures
// cut from the published files (testdata/traces/README.md).

#include <algorithm>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/trace/node_list.h"
#include "loom/trace/trace.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

constexpr char kPods[] = "testdata/traces/openb_pods_small.csv";
constexpr char kNodes[] = "testdata/clusters/openb_nodes_small.csv";

constexpr char kHeader[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n";

TEST(OpenbFixture, SharingPodsKeepTheirShareCpuAndMemory) {
  absl::StatusOr<Trace> trace = ReadTraceFile(kPods, TraceFormat::kAuto, true);
  ASSERT_TRUE(trace.ok()) << trace.status();
  // awk -F, 'NR>1 && $4>0 && $11!=""' gives 157 GPU pods, 50 of them
  // sharing (num_gpu 1, gpu_milli < 1000), asking 174 GPUs in all.
  ASSERT_EQ(trace->jobs.size(), 157u);
  int shares = 0, gpus = 0;
  for (const TraceJob& j : trace->jobs) {
    if (j.gpu_milli > 0) {
      ++shares;
      EXPECT_EQ(j.num_gpus, 1) << j.id;
      EXPECT_LT(j.gpu_milli, 1000) << j.id;
    }
    gpus += j.num_gpus;
    EXPECT_GT(j.cpu_milli, 0) << j.id;
  }
  EXPECT_EQ(shares, 50);
  EXPECT_EQ(gpus, 174);
  const auto pod =
      std::find_if(trace->jobs.begin(), trace->jobs.end(),
                   [](const TraceJob& j) { return j.id == "openb-pod-1118"; });
  ASSERT_NE(pod, trace->jobs.end());
  EXPECT_EQ(pod->gpu_milli, 470);
  EXPECT_EQ(pod->cpu_milli, 11908);
  EXPECT_EQ(pod->memory_mib, 47104);
  EXPECT_EQ(pod->duration_s, 11730324 - 11729202);
}

TEST(OpenbTrace, GpuSpecGivesOneModelOrChoices) {
  const std::string text =
      std::string(kHeader) +
      "a,1000,100,1,1000,V100M16,LS,Running,0,10,1\n"
      "b,1000,100,2,1000,V100M16|V100M32|V100M16,LS,Running,0,10,1\n"
      "c,1000,100,1,500,,LS,Running,0,10,1\n"
      "d,1000,100,1,0,,LS,Running,0,10,1\n";
  absl::StatusOr<Trace> t = ParseTrace(text, "x.csv", TraceFormat::kAuto, true);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->jobs.size(), 4u);
  EXPECT_EQ(t->jobs[0].gpu_model, "v100m16");
  EXPECT_TRUE(t->jobs[0].gpu_model_choices.empty());
  EXPECT_EQ(t->jobs[1].gpu_model, "");
  EXPECT_THAT(t->jobs[1].gpu_model_choices,
              ::testing::ElementsAre("v100m16", "v100m32"));
  EXPECT_EQ(t->jobs[2].gpu_milli, 500);
  EXPECT_EQ(t->jobs[3].gpu_milli, 0) << "gpu_milli 0: a whole GPU";
  EXPECT_EQ(t->jobs[0].gpu_milli, 0) << "gpu_milli 1000: a whole GPU";
}

TEST(OpenbTrace, BrokenLinesNameFileAndLine) {
  const std::string text = std::string(kHeader) +
                           "a,1000,100,1,1000,,LS,Running,0,10,1\n"
                           "b,lots,100,1,500,,LS,Running,0,10,1\n"
                           "c,1000,100,1,12.5,,LS,Running,0,10,1\n"
                           "d,1000,100,1,500,V100||T4,LS,Running,0,10,1\n";
  absl::StatusOr<Trace> t =
      ParseTrace(text, "pods.csv", TraceFormat::kAuto, false);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->issues.size(), 3u);
  EXPECT_EQ(FormatTraceIssue(t->issues[0]),
            "line 3: cpu_milli: not a number: 'lots'");
  EXPECT_EQ(FormatTraceIssue(t->issues[1]),
            "line 4: gpu_milli: must be a whole number from 0 to 1000, got "
            "'12.5'");
  EXPECT_THAT(FormatTraceIssue(t->issues[2]),
              HasSubstr("line 5: gpu_spec: an empty model"));
  absl::StatusOr<Trace> strict =
      ParseTrace(text, "pods.csv", TraceFormat::kAuto, true);
  EXPECT_EQ(strict.status().message(),
            "pods.csv: line 3: cpu_milli: not a number: 'lots'");
}

TEST(OpenbNodeList, ReadsTheFixture) {
  absl::StatusOr<std::vector<NodeListEntry>> nodes = ReadNodeListFile(kNodes);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 31u);
  int gpus = 0;
  for (const NodeListEntry& n : *nodes) gpus += n.gpus;
  EXPECT_EQ(gpus, 150);
  EXPECT_EQ((*nodes)[0].name, "openb-node-0001");
  EXPECT_EQ((*nodes)[0].model, "p100");
  EXPECT_EQ((*nodes)[0].gpus, 2);
  EXPECT_EQ((*nodes)[0].cpu_milli, 64000);
  EXPECT_EQ((*nodes)[0].memory_mib, 262144);
  EXPECT_EQ((*nodes)[0].line, 2);
  EXPECT_TRUE(IsNodeListHeader("sn,cpu_milli,memory_mib,gpu,model"));
  EXPECT_FALSE(IsNodeListHeader(kHeader));
}

TEST(OpenbNodeList, BrokenLinesAreErrorsNamingFileAndLine) {
  const std::string head = "sn,cpu_milli,memory_mib,gpu,model\n";
  auto error = [&](const std::string& body) {
    absl::StatusOr<std::vector<NodeListEntry>> n =
        ParseNodeList(head + body, "nodes.csv");
    return n.ok() ? std::string("ok") : std::string(n.status().message());
  };
  EXPECT_EQ(error("n1,64000,1024,2,T4\n"), "ok");
  EXPECT_EQ(error("n1,64000,1024,2,T4\nn2,64000,1024,17,T4\n"),
            "nodes.csv: line 3: gpu: must be a whole number from 0 to 16, "
            "got '17'");
  EXPECT_EQ(error("n1,64000,1024,0,T4\n"),
            "nodes.csv: line 2: gpu: must be from 1 to 16, got '0'");
  EXPECT_EQ(error("n1,64000,1024,2\n"),
            "nodes.csv: line 2: expected 5 fields, got 4");
  EXPECT_EQ(error("n1,64000,1024,2,T4\nn1,64000,1024,2,T4\n"),
            "nodes.csv: line 3: sn: repeats node 'n1'");
  EXPECT_EQ(error("n1,x,1024,2,T4\n"),
            "nodes.csv: line 2: cpu_milli: not a number: 'x'");
  EXPECT_EQ(error("n1,64000,1024,2,T 4\n"),
            "nodes.csv: line 2: model: not a GPU model name (letters, "
            "digits, '.', '_', '-'): 'T 4'");
  EXPECT_EQ(error(""), "nodes.csv: the node list has no nodes");
  absl::StatusOr<std::vector<NodeListEntry>> bad =
      ParseNodeList("sn,gpu\nn1,2\n", "nodes.csv");
  EXPECT_THAT(bad.status().message(), HasSubstr("lacks column 'cpu_milli'"));
  EXPECT_EQ(ReadNodeListFile("no/such/file.csv").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace loom
