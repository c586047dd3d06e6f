#include "loom/core/job.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/core/cluster.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(JobKind, RoundTrip) {
  for (JobKind kind : {JobKind::kTrain, JobKind::kFinetune, JobKind::kInference,
                       JobKind::kBatch}) {
    absl::StatusOr<JobKind> parsed = ParseJobKind(JobKindName(kind));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, kind);
  }
  absl::StatusOr<JobKind> bad = ParseJobKind("training");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'training'"));
}

TEST(ShapeFromTotalGpus, UpToOneNodeIsOneTask) {
  for (int gpus = 1; gpus <= 8; ++gpus) {
    absl::StatusOr<JobShape> shape = ShapeFromTotalGpus(gpus, 8);
    ASSERT_TRUE(shape.ok()) << gpus << ": " << shape.status();
    EXPECT_EQ(shape->tasks, 1);
    EXPECT_EQ(shape->gpus_per_task, gpus);
    EXPECT_EQ(shape->TotalGpus(), gpus);
    EXPECT_EQ(shape->gpu_model, kAnyGpuModel);
  }
}

TEST(ShapeFromTotalGpus, LargerCountsTakeWholeNodes) {
  absl::StatusOr<JobShape> shape = ShapeFromTotalGpus(16, 8);
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(shape->tasks, 2);
  EXPECT_EQ(shape->gpus_per_task, 8);

  shape = ShapeFromTotalGpus(1024, 8);
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(shape->tasks, 128);

  absl::StatusOr<JobShape> odd = ShapeFromTotalGpus(12, 8);
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(odd.status().message()), HasSubstr("12"));
}

TEST(ShapeFromTotalGpus, SpreadOverNodes) {
  absl::StatusOr<JobShape> shape = ShapeFromTotalGpus(12, 8, 3);
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(shape->tasks, 3);
  EXPECT_EQ(shape->gpus_per_task, 4);

  shape = ShapeFromTotalGpus(8, 8, 1);
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(shape->tasks, 1);
  EXPECT_EQ(shape->gpus_per_task, 8);

  EXPECT_FALSE(ShapeFromTotalGpus(12, 8, 5).ok());
  EXPECT_FALSE(ShapeFromTotalGpus(12, 8, -1).ok());
}

TEST(ShapeFromTotalGpus, Rejects) {
  EXPECT_FALSE(ShapeFromTotalGpus(0, 8).ok());
  EXPECT_FALSE(ShapeFromTotalGpus(-4, 8).ok());
  EXPECT_FALSE(ShapeFromTotalGpus(4, 0).ok());
}

class ValidateJobRequestTest : public ::testing::Test {
 protected:
  ValidateJobRequestTest() {
    cluster_.gpu_models = DefaultGpuModels();
    job_.shape.tasks = 2;
    job_.shape.gpus_per_task = 8;
    job_.shape.gpu_model = 0;
    job_.time_limit = absl::Hours(12);
  }

  // Expects the job to be rejected with a message that names `field`.
  void ExpectRejected(const std::string& field) {
    absl::Status st = ValidateJobRequest(job_, cluster_);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(field));
  }

  Cluster cluster_;
  JobRequest job_;
};

TEST_F(ValidateJobRequestTest, AcceptsAValidJob) {
  EXPECT_TRUE(ValidateJobRequest(job_, cluster_).ok());
  job_.shape.gpu_model = kAnyGpuModel;
  job_.time_limit = absl::InfiniteDuration();
  EXPECT_TRUE(ValidateJobRequest(job_, cluster_).ok());
  // A CPU-only task is allowed.
  job_.shape.gpus_per_task = 0;
  EXPECT_TRUE(ValidateJobRequest(job_, cluster_).ok());
}

TEST_F(ValidateJobRequestTest, RejectsNoTasks) {
  job_.shape.tasks = 0;
  ExpectRejected("tasks");
}

TEST_F(ValidateJobRequestTest, RejectsNegativeGpus) {
  job_.shape.gpus_per_task = -1;
  ExpectRejected("resources.gpus_per_task");
}

TEST_F(ValidateJobRequestTest, RejectsMoreGpusThanAnyNodeCanHold) {
  job_.shape.gpus_per_task = kMaxGpusPerNode + 1;
  ExpectRejected("resources.gpus_per_task");
}

TEST_F(ValidateJobRequestTest, RejectsUnknownGpuModel) {
  job_.shape.gpu_model = 2;
  ExpectRejected("resources.gpu_model");
  job_.shape.gpu_model = -2;
  ExpectRejected("resources.gpu_model");
}

TEST_F(ValidateJobRequestTest, RejectsNegativeCpusAndMemory) {
  job_.shape.cpus_milli_per_task = -1;
  ExpectRejected("resources.cpus_per_task");
  job_.shape.cpus_milli_per_task = 0;
  job_.shape.memory_bytes_per_task = -1;
  ExpectRejected("resources.memory_per_task");
}

TEST_F(ValidateJobRequestTest, RejectsNonPositiveTimeLimit) {
  job_.time_limit = absl::ZeroDuration();
  ExpectRejected("time_limit");
}

TEST_F(ValidateJobRequestTest, ChecksSparesAndRecoveryHints) {
  cluster_.nodes.resize(4);
  job_.spares = kMaxSpares;
  job_.last_nodes = {3, -1};
  job_.spare_nodes = {0, 1};
  EXPECT_TRUE(ValidateJobRequest(job_, cluster_).ok());
  job_.spares = kMaxSpares + 1;
  ExpectRejected("spares");
  job_.spares = -1;
  ExpectRejected("spares");
  job_.spares = 1;
  job_.last_nodes = {4, 0};
  ExpectRejected("last_nodes: node 4");
  job_.last_nodes = {-2, 0};
  ExpectRejected("last_nodes");
  job_.last_nodes = {0};  // one per task
  ExpectRejected("last_nodes: 1 entries");
  job_.last_nodes = {};
  job_.spare_nodes = {-1};
  ExpectRejected("spare_nodes");
}

}  // namespace
}  // namespace loom
