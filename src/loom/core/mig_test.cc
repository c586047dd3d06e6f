// MIG geometry (mig.h): NVIDIA's profiles per product, and the layout rules
// the scheduler and the agent rely on.

#include "loom/core/mig.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

std::vector<std::string> Names(const std::vector<MigProfile>& profiles) {
  std::vector<std::string> out;
  for (const MigProfile& p : profiles) {
    out.push_back(p.name + "x" + std::to_string(p.max_instances));
  }
  return out;
}

TEST(MigTest, TheProfilesOfEachProduct) {
  EXPECT_THAT(Names(MigProfilesFor("h200", 141 * kGiB)),
              ElementsAre("1g.18gbx7", "1g.35gbx4", "2g.35gbx3", "3g.71gbx2",
                          "4g.71gbx1", "7g.141gbx1"));
  EXPECT_THAT(Names(MigProfilesFor("a100", 80 * kGiB)),
              ElementsAre("1g.10gbx7", "1g.20gbx4", "2g.20gbx3", "3g.40gbx2",
                          "4g.40gbx1", "7g.80gbx1"));
  EXPECT_THAT(Names(MigProfilesFor("a100", 40 * kGiB)),
              ElementsAre("1g.5gbx7", "1g.10gbx4", "2g.10gbx3", "3g.20gbx2",
                          "4g.20gbx1", "7g.40gbx1"));
  // Not MIG-capable, or a size no product has.
  EXPECT_TRUE(MigProfilesFor("l40s", 48 * kGiB).empty());
  EXPECT_TRUE(MigProfilesFor("a100", 60 * kGiB).empty());
  const std::vector<MigProfile> h200 = MigProfilesFor("h200", 141 * kGiB);
  const MigProfile* third = FindMigProfile(h200, "3g.71gb");
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(third->compute_slices, 3);
  EXPECT_EQ(third->memory_slices, 4);
  EXPECT_EQ(third->memory_bytes, 141 * kGiB / 2);
  EXPECT_THAT(third->starts, ElementsAre(0, 4));
  EXPECT_EQ(FindMigProfile(h200, "3g.40gb"), nullptr);
}

TEST(MigTest, SevenSmallestSlicesFillAGpu) {
  const std::vector<MigProfile> p = MigProfilesFor("h200", 141 * kGiB);
  std::vector<MigInstance> layout;
  for (int i = 0; i < 7; ++i) {
    std::optional<int> start = FindMigStart(p, layout, 0);
    ASSERT_TRUE(start.has_value()) << i;
    EXPECT_EQ(*start, i);
    layout.push_back({0, *start});
    EXPECT_TRUE(ValidateMigLayout(p, layout).ok());
  }
  EXPECT_FALSE(FindMigStart(p, layout, 0).has_value());
  EXPECT_FALSE(FindMigStart(p, layout, 1).has_value());  // 1g.35gb at 6: taken
  EXPECT_EQ(MigMemoryMask(p, layout), 0x7fu);
}

TEST(MigTest, PlacementRulesAndMixedLayouts) {
  const std::vector<MigProfile> p = MigProfilesFor("h200", 141 * kGiB);
  const int k1g = 0, k1g35 = 1, k2g = 2, k3g = 3, k4g = 4, k7g = 5;
  // 4g + 3g: the whole GPU.
  EXPECT_TRUE(ValidateMigLayout(p, {{k4g, 0}, {k3g, 4}}).ok());
  EXPECT_FALSE(FindMigStart(p, {{k4g, 0}, {k3g, 4}}, k1g).has_value());
  // A 3g next to small slices: only at 4 once 0-3 are taken.
  EXPECT_EQ(FindMigStart(p, {{k1g, 0}, {k1g, 1}}, k3g), 4);
  EXPECT_FALSE(FindMigStart(p, {{k1g, 0}, {k1g, 4}}, k3g).has_value());
  EXPECT_EQ(FindMigStart(p, {{k2g, 0}}, k2g), 2);
  EXPECT_EQ(FindMigStart(p, {}, k7g), 0);
  EXPECT_FALSE(FindMigStart(p, {{k1g, 3}}, k7g).has_value());
  EXPECT_EQ(FindMigStart(p, {{k2g, 0}, {k2g, 2}, {k2g, 4}}, k1g35), 6);
  // Broken layouts say which instance and rule.
  absl::Status s = ValidateMigLayout(p, {{k3g, 2}});
  EXPECT_THAT(
      std::string(s.message()),
      HasSubstr("instance 0 (3g.71gb): may not start at memory slice 2"));
  s = ValidateMigLayout(p, {{k2g, 0}, {k1g, 1}});
  EXPECT_THAT(
      std::string(s.message()),
      HasSubstr("instance 1 (1g.18gb at 1): its memory slices overlap"));
  s = ValidateMigLayout(p, {{9, 0}});
  EXPECT_THAT(std::string(s.message()), HasSubstr("instance 0: no profile 9"));
}

}  // namespace
}  // namespace loom
