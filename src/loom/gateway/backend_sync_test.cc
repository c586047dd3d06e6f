#include "loom/gateway/backend_sync.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::gateway {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Kind = SyncAction::Kind;

ObservedServer Seen(std::string name, std::string address,
                    ServerAdminState admin, int64_t sessions = 0,
                    int64_t queued = 0) {
  return {std::move(name), std::move(address), admin, sessions, queued};
}

std::vector<std::string> Described(const BackendDiff& diff) {
  std::vector<std::string> out;
  for (const SyncAction& a : diff.actions) out.push_back(DescribeAction(a));
  return out;
}

constexpr auto kReady = ServerAdminState::kReady;
constexpr auto kDrain = ServerAdminState::kDrain;
constexpr auto kMaint = ServerAdminState::kMaint;

TEST(DiffBackendTest, EmptyBackendGetsEveryServingServer) {
  const BackendDiff d = DiffBackend(
      {{"r2", {"10.0.0.2:80", true}}, {"r1", {"10.0.0.1:80", true}}}, {});
  EXPECT_THAT(Described(d),
              ElementsAre("add r1 10.0.0.1:80", "add r2 10.0.0.2:80"));
  EXPECT_THAT(d.waiting, IsEmpty());
}

TEST(DiffBackendTest, ConvergedMeansNothingToDo) {
  const BackendDiff d = DiffBackend(
      {{"r1", {"10.0.0.1:80", true}}, {"r2", {"[::1]:80", true}}},
      {Seen("r1", "10.0.0.1:80", kReady, 7), Seen("r2", "[::1]:80", kReady)});
  EXPECT_THAT(d.actions, IsEmpty());
  EXPECT_THAT(d.waiting, IsEmpty());
  EXPECT_THAT(d.rejected, IsEmpty());
}

TEST(DiffBackendTest, ServingServerLeftInDrainOrMaintIsReadied) {
  const BackendDiff d = DiffBackend(
      {{"r1", {"10.0.0.1:80", true}}, {"r2", {"10.0.0.2:80", true}}},
      {Seen("r1", "10.0.0.1:80", kMaint), Seen("r2", "10.0.0.2:80", kDrain)});
  EXPECT_THAT(Described(d), ElementsAre("ready r1", "ready r2"));
}

TEST(DiffBackendTest, DrainingGoesDrainThenMaintAndDeleteOnceIdle) {
  const DesiredBackend want = {{"r1", {"10.0.0.1:80", false}}};
  // Pass 1: ready -> drain, even with no sessions (a request may land
  // between the read and the drain).
  EXPECT_THAT(Described(DiffBackend(want, {Seen("r1", "10.0.0.1:80", kReady)})),
              ElementsAre("drain r1"));
  // Pass 2: still busy -> wait.
  BackendDiff busy = DiffBackend(want, {Seen("r1", "10.0.0.1:80", kDrain, 3)});
  EXPECT_THAT(busy.actions, IsEmpty());
  EXPECT_THAT(busy.waiting, ElementsAre("r1"));
  // A queue counts as busy too.
  busy = DiffBackend(want, {Seen("r1", "10.0.0.1:80", kDrain, 0, 1)});
  EXPECT_THAT(busy.waiting, ElementsAre("r1"));
  // Pass 3: idle -> maint, delete.
  EXPECT_THAT(Described(DiffBackend(want, {Seen("r1", "10.0.0.1:80", kDrain)})),
              ElementsAre("maint r1", "delete r1"));
  // Already in maint and idle: delete only.
  EXPECT_THAT(Described(DiffBackend(want, {Seen("r1", "10.0.0.1:80", kMaint)})),
              ElementsAre("delete r1"));
  // Gone: done.
  EXPECT_THAT(DiffBackend(want, {}).actions, IsEmpty());
}

TEST(DiffBackendTest, UnwantedServersAreRetiredLikeDrainingOnes) {
  const BackendDiff d = DiffBackend(
      {{"r1", {"10.0.0.1:80", true}}},
      {Seen("r1", "10.0.0.1:80", kReady), Seen("old", "10.0.0.9:80", kReady),
       Seen("older", "10.0.0.8:80", kDrain)});
  EXPECT_THAT(Described(d),
              ElementsAre("drain old", "maint older", "delete older"));
}

TEST(DiffBackendTest, AddsComeBeforeRemovals) {
  const BackendDiff d = DiffBackend(
      {{"a-old", {"10.0.0.1:80", false}}, {"z-new", {"10.0.0.2:80", true}}},
      {Seen("a-old", "10.0.0.1:80", kDrain)});
  EXPECT_THAT(Described(d), ElementsAre("add z-new 10.0.0.2:80", "maint a-old",
                                        "delete a-old"));
}

TEST(DiffBackendTest, MovedServerIsRetiredThenAddedAtItsNewAddress) {
  const DesiredBackend want = {{"r1", {"10.0.0.2:80", true}}};
  EXPECT_THAT(Described(DiffBackend(want, {Seen("r1", "10.0.0.1:80", kReady)})),
              ElementsAre("drain r1"));
  EXPECT_THAT(DiffBackend(want, {Seen("r1", "10.0.0.1:80", kDrain, 1)}).waiting,
              ElementsAre("r1"));
  EXPECT_THAT(Described(DiffBackend(want, {Seen("r1", "10.0.0.1:80", kDrain)})),
              ElementsAre("maint r1", "delete r1", "add r1 10.0.0.2:80"));
}

TEST(DiffBackendTest, AddressesCompareInCanonicalForm) {
  // The wanted address goes through ParseServerAddress/FormatServerAddress,
  // the form show servers state is read back in: no spurious move.
  const BackendDiff d = DiffBackend({{"r1", {"127.0.0.1:080", true}}},
                                    {Seen("r1", "127.0.0.1:80", kReady)});
  EXPECT_THAT(d.actions, IsEmpty());
}

TEST(DiffBackendTest, InvalidWantedServersAreRejectedAndLeftAlone) {
  const BackendDiff d = DiffBackend({{"bad name", {"10.0.0.1:80", true}},
                                     {"r1", {"replica-1:80", true}},
                                     {"r2", {"10.0.0.2:80", true}}},
                                    {Seen("r1", "10.0.0.1:80", kReady)});
  // r1 keeps serving at its old address rather than being retired for an
  // address that cannot be added.
  EXPECT_THAT(Described(d), ElementsAre("add r2 10.0.0.2:80"));
  ASSERT_EQ(d.rejected.size(), 2u);
  EXPECT_THAT(d.rejected[0], ::testing::HasSubstr("'bad name'"));
  EXPECT_THAT(d.rejected[1], ::testing::HasSubstr("replica-1:80"));
}

TEST(MergeObservationTest, JoinsStateAndSessionsPerBackend) {
  std::vector<ServerStateRow> states = {
      {"be_a", "r1", "10.0.0.1:80", kReady, 2},
      {"be_a", "r2", "10.0.0.2:80", kDrain, 2},
      {"be_b", "r1", "10.0.0.3:80", kMaint, 0}};
  StatRow r1;
  r1.proxy = "be_a";
  r1.name = "r1";
  r1.type = StatRow::Type::kServer;
  r1.scur = 4;
  r1.qcur = 1;
  StatRow be = r1;
  be.name = "BACKEND";
  be.type = StatRow::Type::kBackend;
  be.scur = 99;
  const auto merged = MergeObservation(states, {r1, be});
  ASSERT_EQ(merged.size(), 2u);
  const std::vector<ObservedServer>& a = merged.at("be_a");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].name, "r1");
  EXPECT_EQ(a[0].sessions, 4);
  EXPECT_EQ(a[0].queued, 1);
  EXPECT_EQ(a[1].admin, kDrain);
  EXPECT_EQ(a[1].sessions, 0);  // no stat row: nothing known to be running
  EXPECT_EQ(merged.at("be_b")[0].admin, kMaint);
}

TEST(SyncReportTest, StatusSummarisesFailures) {
  SyncReport r;
  EXPECT_TRUE(r.status().ok());
  r.applied.push_back({Kind::kAdd, "r1", "10.0.0.1:80"});
  r.failed.push_back(
      {{Kind::kDelete, "r2", ""}, absl::FailedPreconditionError("busy")});
  const absl::Status s = r.status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "1 of 2 backend changes failed; first: delete r2: busy");
}

}  // namespace
}  // namespace loom::gateway
