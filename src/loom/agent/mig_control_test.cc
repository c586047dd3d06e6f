// MIG layouts (mig_control.h): `NvmlMigControl` against the stand-in NVML
// library (its calls read back from `LOOM_FAKE_NVML_LOG`): MIG mode enabled
// and seven 1g.18gb instances made at their placements, nothing made or
// destroyed when the layout is there, a repartition destroying the old
// instances before it creates the new ones and keeping those it can, the
// read-only `Describe`, turning MIG off, a mode change that waits while the
// GPU is held; and `EmulatedMigControl`, with the calls it records and its
// faults.

#include "loom/agent/mig_control.h"

#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/emulated_mig_control.h"

namespace loom {
namespace {

using agent_testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Two GPUs as the stand-in library describes them ("NVIDIA H200").
std::vector<GpuDevice> FakeNvmlGpus() {
  std::vector<GpuDevice> gpus(2);
  for (int i = 0; i < 2; ++i) {
    gpus[i].index = i;
    gpus[i].model = "h200";
    gpus[i].memory_bytes = 150754820096;
  }
  return gpus;
}

MigLayout Seven1g() {
  MigLayout layout;
  for (int s = 0; s < 7; ++s) layout.emplace_back("1g.18gb", s);
  return layout;
}

// The lines of `path` (none when it does not exist).
std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The lines that start with `call`.
std::vector<std::string> Calls(const std::vector<std::string>& lines,
                               std::string_view call) {
  std::vector<std::string> out;
  for (const std::string& l : lines) {
    if (absl::StartsWith(l, absl::StrCat(std::string(call), " ")))
      out.push_back(l);
  }
  return out;
}

// Whether any line changes the GPU (creates, destroys, sets the mode).
bool AnyChange(const std::vector<std::string>& lines) {
  for (const std::string& l : lines) {
    if (absl::StrContains(l, "Create") || absl::StrContains(l, "Destroy") ||
        absl::StartsWith(l, "nvmlDeviceSetMigMode")) {
      return true;
    }
  }
  return false;
}

std::set<std::string> Uuids(const std::vector<MigInstanceInfo>& instances) {
  std::set<std::string> out;
  for (const MigInstanceInfo& in : instances) out.insert(in.uuid);
  return out;
}

class NvmlMigControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = absl::StrCat(dir_.path(), "/nvml.log");
    ::setenv("LOOM_FAKE_NVML_LOG", log_.c_str(), 1);
  }
  void TearDown() override { ::unsetenv("LOOM_FAKE_NVML_LOG"); }
  // The calls logged since the last `Take`.
  std::vector<std::string> Take() {
    std::vector<std::string> lines = ReadLines(log_);
    std::remove(log_.c_str());
    return lines;
  }

  TempDir dir_;
  std::string log_;
  NvmlMigControl mig_{FakeNvmlGpus(), LOOM_FAKE_NVML_PATH};
};

TEST(MigProfileIdsTest, NvmlIdsFollowTheSliceCounts) {
  std::vector<int> ids;
  for (const MigProfile& p : MigProfilesFor("h200", 141'000'000'000)) {
    ids.push_back(NvmlGpuInstanceProfileId(p));
  }
  // 1g.18gb, 1g.35gb (1_SLICE_REV2), 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb.
  EXPECT_THAT(ids, ElementsAre(0, 9, 1, 2, 3, 4));
  EXPECT_EQ(NvmlComputeInstanceProfileId(3), 2);
  EXPECT_EQ(NvmlComputeInstanceProfileId(7), 4);
  EXPECT_EQ(NvmlComputeInstanceProfileId(5), -1);
}

TEST_F(NvmlMigControlTest, DescribeIsReadOnly) {
  absl::StatusOr<MigState> state = mig_.Describe(1);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_TRUE(state->capable);
  EXPECT_FALSE(state->enabled);
  EXPECT_FALSE(state->pending);
  EXPECT_THAT(state->instances, IsEmpty());
  const std::vector<std::string> calls = Take();
  EXPECT_THAT(calls, ElementsAre("nvmlDeviceGetMigMode gpu=1"));
  EXPECT_EQ(MigStateJson(*state),
            nlohmann::json::parse(R"({"capable": true, "mode": "disabled",
                "pending": "disabled", "instances": []})"));
}

TEST_F(NvmlMigControlTest, FirstEnsureEnablesMigAndMakesSeveninstances) {
  absl::StatusOr<std::vector<MigInstanceInfo>> made = mig_.Ensure(0, Seven1g());
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_EQ(made->size(), 7u);
  for (int s = 0; s < 7; ++s) {
    EXPECT_EQ((*made)[s].profile, "1g.18gb");
    EXPECT_EQ((*made)[s].start, s);
    EXPECT_TRUE(absl::StartsWith((*made)[s].uuid, "MIG-")) << (*made)[s].uuid;
  }
  EXPECT_EQ(Uuids(*made).size(), 7u);

  const std::vector<std::string> calls = Take();
  EXPECT_THAT(Calls(calls, "nvmlDeviceSetMigMode"),
              ElementsAre("nvmlDeviceSetMigMode gpu=0 mode=1"));
  std::vector<std::string> want;
  for (int s = 0; s < 7; ++s) {
    want.push_back(absl::StrCat(
        "nvmlDeviceCreateGpuInstanceWithPlacement gpu=0 profile=0 start=", s,
        " size=1"));
  }
  EXPECT_EQ(Calls(calls, "nvmlDeviceCreateGpuInstanceWithPlacement"), want);
  const std::vector<std::string> cis =
      Calls(calls, "nvmlGpuInstanceCreateComputeInstance");
  ASSERT_EQ(cis.size(), 7u);
  for (const std::string& c : cis) EXPECT_THAT(c, HasSubstr(" profile=0"));
  EXPECT_THAT(Calls(calls, "nvmlGpuInstanceDestroy"), IsEmpty());

  // Describe agrees; GPU 1 is untouched.
  absl::StatusOr<MigState> state = mig_.Describe(0);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_TRUE(state->enabled);
  EXPECT_EQ(state->instances, *made);
  EXPECT_FALSE(mig_.Describe(1)->enabled);
}

TEST_F(NvmlMigControlTest, TheSameLayoutAgainChangesNothing) {
  absl::StatusOr<std::vector<MigInstanceInfo>> first =
      mig_.Ensure(0, Seven1g());
  ASSERT_TRUE(first.ok()) << first.status();
  Take();
  absl::StatusOr<std::vector<MigInstanceInfo>> again =
      mig_.Ensure(0, Seven1g());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *first);
  const std::vector<std::string> calls = Take();
  EXPECT_FALSE(calls.empty());  // it looked
  EXPECT_FALSE(AnyChange(calls)) << absl::StrJoin(calls, "\n");
}

TEST_F(NvmlMigControlTest, RepartitionDestroysTheOldInstancesFirst) {
  ASSERT_TRUE(mig_.Ensure(0, Seven1g()).ok());
  Take();
  absl::StatusOr<std::vector<MigInstanceInfo>> made =
      mig_.Ensure(0, {{"3g.71gb", 0}, {"3g.71gb", 4}});
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_EQ(made->size(), 2u);
  EXPECT_EQ((*made)[0],
            (MigInstanceInfo{"3g.71gb", 0, (*made)[0].uuid, (*made)[0].gi_id}));
  EXPECT_EQ((*made)[1].start, 4);
  // Each instance has its own GPU instance id (DCGM's GPU_I_ID).
  EXPECT_GE((*made)[0].gi_id, 0);
  EXPECT_NE((*made)[0].gi_id, (*made)[1].gi_id);
  EXPECT_NE((*made)[0].uuid, (*made)[1].uuid);

  const std::vector<std::string> calls = Take();
  EXPECT_EQ(Calls(calls, "nvmlComputeInstanceDestroy").size(), 7u);
  EXPECT_EQ(Calls(calls, "nvmlGpuInstanceDestroy").size(), 7u);
  EXPECT_THAT(Calls(calls, "nvmlDeviceCreateGpuInstanceWithPlacement"),
              ElementsAre("nvmlDeviceCreateGpuInstanceWithPlacement gpu=0 "
                          "profile=2 start=0 size=4",
                          "nvmlDeviceCreateGpuInstanceWithPlacement gpu=0 "
                          "profile=2 start=4 size=4"));
  EXPECT_THAT(Calls(calls, "nvmlGpuInstanceCreateComputeInstance"),
              ElementsAre(HasSubstr(" profile=2"), HasSubstr(" profile=2")));
  EXPECT_THAT(Calls(calls, "nvmlDeviceSetMigMode"), IsEmpty());
  // Every destroy comes before the first create, and each GPU instance's
  // compute instance before it.
  size_t last_destroy = 0, first_create = calls.size();
  for (size_t i = 0; i < calls.size(); ++i) {
    if (absl::StrContains(calls[i], "Destroy")) last_destroy = i;
    if (absl::StrContains(calls[i], "Create") && first_create == calls.size()) {
      first_create = i;
    }
  }
  EXPECT_LT(last_destroy, first_create);
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!absl::StartsWith(calls[i], "nvmlGpuInstanceDestroy")) continue;
    const std::string gi = calls[i].substr(calls[i].find(" gi="));
    bool ci_before = false;
    for (size_t j = 0; j < i; ++j) {
      ci_before |= absl::StartsWith(calls[j], "nvmlComputeInstanceDestroy") &&
                   absl::StrContains(calls[j], absl::StrCat(gi, " ci=0"));
    }
    EXPECT_TRUE(ci_before) << calls[i];
  }
}

TEST_F(NvmlMigControlTest, InstancesInBothLayoutsAreKept) {
  absl::StatusOr<std::vector<MigInstanceInfo>> before =
      mig_.Ensure(0, Seven1g());
  ASSERT_TRUE(before.ok()) << before.status();
  Take();
  absl::StatusOr<std::vector<MigInstanceInfo>> after = mig_.Ensure(
      0, {{"1g.18gb", 0}, {"1g.18gb", 1}, {"2g.35gb", 2}, {"3g.71gb", 4}});
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->size(), 4u);
  EXPECT_EQ((*after)[0], (*before)[0]);  // same instance, same UUID
  EXPECT_EQ((*after)[1], (*before)[1]);
  EXPECT_EQ((*after)[2].profile, "2g.35gb");
  const std::vector<std::string> calls = Take();
  EXPECT_EQ(Calls(calls, "nvmlGpuInstanceDestroy").size(), 5u);
  EXPECT_THAT(Calls(calls, "nvmlDeviceCreateGpuInstanceWithPlacement"),
              ElementsAre(HasSubstr("profile=1 start=2 size=2"),
                          HasSubstr("profile=2 start=4 size=4")));
}

TEST_F(NvmlMigControlTest, TheTwoSliceOneGProfileIsRev2) {
  absl::StatusOr<std::vector<MigInstanceInfo>> made =
      mig_.Ensure(1, {{"1g.35gb", 0}, {"1g.35gb", 6}});
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_THAT(Calls(Take(), "nvmlDeviceCreateGpuInstanceWithPlacement"),
              ElementsAre(HasSubstr("gpu=1 profile=9 start=0 size=2"),
                          HasSubstr("gpu=1 profile=9 start=6 size=2")));
  EXPECT_EQ((*made)[1].profile, "1g.35gb");
}

TEST_F(NvmlMigControlTest, BadLayoutsAndNoLibrary) {
  absl::StatusOr<std::vector<MigInstanceInfo>> bad =
      mig_.Ensure(0, {{"1g.18gb", 7}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("GPU 0"));
  bad = mig_.Ensure(0, {{"1g.10gb", 0}});  // an A100's
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("no MIG profile '1g.10gb'"));
  bad = mig_.Ensure(0, {{"4g.71gb", 0}, {"3g.71gb", 4}, {"1g.18gb", 4}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(AnyChange(Take()));

  NvmlMigControl missing(FakeNvmlGpus(), "/nonexistent/libnvidia-ml.so.1");
  EXPECT_EQ(missing.Describe(0).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(missing.Ensure(0, Seven1g()).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(NvmlMigControlTest, DisableDestroysTheInstancesThenTurnsTheModeOff) {
  ASSERT_TRUE(mig_.Ensure(0, Seven1g()).ok());
  Take();
  absl::StatusOr<MigState> off = mig_.Disable(0);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_TRUE(off->capable);
  EXPECT_FALSE(off->enabled);
  EXPECT_FALSE(MigModeWaits(*off));
  EXPECT_THAT(off->instances, IsEmpty());
  std::vector<std::string> calls = Take();
  EXPECT_EQ(Calls(calls, "nvmlComputeInstanceDestroy").size(), 7u);
  EXPECT_EQ(Calls(calls, "nvmlGpuInstanceDestroy").size(), 7u);
  ASSERT_THAT(Calls(calls, "nvmlDeviceSetMigMode"),
              ElementsAre("nvmlDeviceSetMigMode gpu=0 mode=0"));
  size_t set = 0, last_destroy = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (absl::StartsWith(calls[i], "nvmlDeviceSetMigMode")) set = i;
    if (absl::StrContains(calls[i], "Destroy")) last_destroy = i;
  }
  EXPECT_LT(last_destroy, set);
  // Off already, or never MIG: nothing changes.
  ASSERT_TRUE(mig_.Disable(0).ok());
  ASSERT_TRUE(mig_.Disable(1).ok());
  calls = Take();
  EXPECT_FALSE(AnyChange(calls)) << absl::StrJoin(calls, "\n");
}

// Sets an environment variable for as long as it lives.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() { Clear(); }
  void Clear() { ::unsetenv(name_); }

 private:
  const char* name_;
};

TEST_F(NvmlMigControlTest, AModeChangeWaitsWhileTheGpuIsHeld) {
  ScopedEnv held("LOOM_FAKE_NVML_MIG_HELD", "0");
  absl::StatusOr<std::vector<MigInstanceInfo>> made = mig_.Ensure(0, Seven1g());
  EXPECT_EQ(made.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(made.status().message(),
              HasSubstr("MIG mode is enabled only after a GPU reset"));
  absl::StatusOr<MigState> state = mig_.Describe(0);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_FALSE(state->enabled);
  EXPECT_TRUE(state->pending);
  EXPECT_TRUE(MigModeWaits(*state));
  // Still held: asking again leaves it waiting.
  Take();
  state = mig_.Settle(0);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_TRUE(MigModeWaits(*state));
  EXPECT_THAT(Calls(Take(), "nvmlDeviceSetMigMode"),
              ElementsAre("nvmlDeviceSetMigMode gpu=0 mode=1"));
  // Let go: the next ask makes it; then nothing waits, nothing is asked.
  held.Clear();
  state = mig_.Settle(0);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_TRUE(state->enabled);
  EXPECT_FALSE(MigModeWaits(*state));
  Take();
  ASSERT_TRUE(mig_.Settle(0).ok());
  EXPECT_FALSE(AnyChange(Take()));
  EXPECT_TRUE(mig_.Ensure(0, Seven1g()).ok());
}

// --- EmulatedMigControl ------------------------------------------------------

std::vector<GpuDevice> EmulatedGpus(const std::string& node,
                                    const char* spec = "8xH200") {
  return EmulatedGpuProbe(ParseGpuEmulation(spec).value(), node)
      .Probe()
      .value();
}

TEST(EmulatedMigControlTest, RecordsTheCallsItStandsFor) {
  TempDir dir;
  const std::string log = absl::StrCat(dir.path(), "/mig.log");
  EmulatedMigControl mig("h200-0", EmulatedGpus("h200-0"), log);
  absl::StatusOr<MigState> state = mig.Describe(3);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_TRUE(state->capable);
  EXPECT_FALSE(state->enabled);
  EXPECT_THAT(ReadLines(log), IsEmpty());  // read-only

  absl::StatusOr<std::vector<MigInstanceInfo>> made = mig.Ensure(3, Seven1g());
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(Uuids(*made).size(), 7u);
  std::vector<std::string> lines = ReadLines(log);
  EXPECT_THAT(Calls(lines, "nvmlDeviceSetMigMode"),
              ElementsAre("nvmlDeviceSetMigMode gpu=3 mode=1 node=h200-0"));
  const std::vector<std::string> creates =
      Calls(lines, "nvmlDeviceCreateGpuInstanceWithPlacement");
  ASSERT_EQ(creates.size(), 7u);
  EXPECT_EQ(creates[2],
            "nvmlDeviceCreateGpuInstanceWithPlacement gpu=3 profile=0 start=2 "
            "size=1 node=h200-0");
  EXPECT_EQ(Calls(lines, "nvmlGpuInstanceCreateComputeInstance").size(), 7u);

  // Again: nothing recorded; then a repartition destroys all seven first.
  std::remove(log.c_str());
  ASSERT_TRUE(mig.Ensure(3, Seven1g()).ok());
  EXPECT_THAT(ReadLines(log), IsEmpty());
  ASSERT_TRUE(mig.Ensure(3, {{"3g.71gb", 0}, {"3g.71gb", 4}}).ok());
  lines = ReadLines(log);
  ASSERT_EQ(lines.size(), 7u * 2 + 2 * 2);
  EXPECT_TRUE(absl::StartsWith(lines[0], "nvmlComputeInstanceDestroy gpu=3"));
  EXPECT_TRUE(absl::StartsWith(lines[13], "nvmlGpuInstanceDestroy gpu=3"));
  EXPECT_EQ(lines[14],
            "nvmlDeviceCreateGpuInstanceWithPlacement gpu=3 profile=2 start=0 "
            "size=4 node=h200-0");
  state = mig.Describe(3);
  EXPECT_TRUE(state->enabled);
  EXPECT_EQ(state->instances.size(), 2u);
}

// The faults: a GPU held open makes a change of MIG mode wait, both ways,
// until it is let go and asked again, or reset.
TEST(EmulatedMigControlTest, AHeldGpuMakesModeChangesWait) {
  TempDir dir;
  const std::string log = absl::StrCat(dir.path(), "/mig.log");
  EmulatedMigControl mig("h200-0", EmulatedGpus("h200-0"), log);
  ASSERT_TRUE(mig.Hold(2, true).ok());
  absl::StatusOr<std::vector<MigInstanceInfo>> made = mig.Ensure(2, Seven1g());
  EXPECT_EQ(made.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(made.status().message(), HasSubstr("GPU 2: MIG mode is enabled "
                                                 "only after a GPU reset"));
  EXPECT_TRUE(MigModeWaits(mig.Describe(2).value()));
  EXPECT_TRUE(MigModeWaits(mig.Settle(2).value()));
  // Taken back: a task that wants the GPU whole turns MIG off, which
  // needs no change now.
  absl::StatusOr<MigState> off = mig.Disable(2);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->enabled);
  EXPECT_FALSE(MigModeWaits(*off));
  // A reset makes a waiting mode take effect.
  EXPECT_FALSE(mig.Ensure(2, Seven1g()).ok());
  ASSERT_TRUE(mig.Reset(2).ok());
  EXPECT_TRUE(mig.Describe(2)->enabled);
  made = mig.Ensure(2, Seven1g());
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(made->size(), 7u);

  // Turning it off while held waits too, with the instances already gone;
  // let go and asked again, it is off.
  ASSERT_TRUE(mig.Hold(2, true).ok());
  std::remove(log.c_str());
  off = mig.Disable(2);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_TRUE(off->enabled);
  EXPECT_TRUE(MigModeWaits(*off));
  EXPECT_THAT(off->instances, IsEmpty());
  const std::vector<std::string> lines = ReadLines(log);
  EXPECT_EQ(Calls(lines, "nvmlGpuInstanceDestroy").size(), 7u);
  EXPECT_THAT(Calls(lines, "nvmlDeviceSetMigMode"),
              ElementsAre("nvmlDeviceSetMigMode gpu=2 mode=0 node=h200-0"));
  ASSERT_TRUE(mig.Hold(2, false).ok());
  off = mig.Settle(2);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->enabled);
  EXPECT_FALSE(MigModeWaits(*off));
  EXPECT_EQ(mig.Hold(9, true).code(), absl::StatusCode::kInvalidArgument);
}

TEST(EmulatedMigControlTest, UuidsAreStableAndDifferPerNode) {
  EmulatedMigControl a("h200-0", EmulatedGpus("h200-0"));
  EmulatedMigControl again("h200-0", EmulatedGpus("h200-0"));
  EmulatedMigControl b("h200-1", EmulatedGpus("h200-1"));
  auto uuids = [](EmulatedMigControl& m, int gpu) {
    return Uuids(m.Ensure(gpu, Seven1g()).value());
  };
  EXPECT_EQ(uuids(a, 0), uuids(again, 0));
  EXPECT_NE(uuids(a, 0), uuids(b, 0));
  EXPECT_NE(uuids(a, 0), uuids(a, 1));
  for (const std::string& u : uuids(a, 0)) {
    EXPECT_TRUE(absl::StartsWith(u, "MIG-")) << u;
    EXPECT_EQ(u.size(), 40u) << u;  // "MIG-" and a UUID
  }
}

TEST(EmulatedMigControlTest, GpusWithoutMig) {
  EmulatedMigControl mig("l4-0", EmulatedGpus("l4-0", "4xL4:24Gi"));
  absl::StatusOr<MigState> state = mig.Describe(0);
  ASSERT_TRUE(state.ok());
  EXPECT_FALSE(state->capable);
  EXPECT_EQ(mig.Ensure(0, Seven1g()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(mig.Describe(9).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom
