// Tests of Slurm hostlist expansion and compression (hostlist.h).

#include "loom/common/hostlist.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> HostlistExpand(std::string_view list) {
  absl::StatusOr<std::vector<std::string>> hosts = ExpandHostlist(list);
  EXPECT_TRUE(hosts.ok()) << list << ": " << hosts.status();
  return hosts.ok() ? *hosts : std::vector<std::string>{};
}

std::string HostlistExpandError(std::string_view list) {
  absl::StatusOr<std::vector<std::string>> hosts = ExpandHostlist(list);
  EXPECT_FALSE(hosts.ok()) << list;
  EXPECT_EQ(hosts.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(hosts.status().message());
}

TEST(ExpandHostlist, PlainNames) {
  EXPECT_THAT(HostlistExpand("login1"), ElementsAre("login1"));
  EXPECT_THAT(HostlistExpand("a,b, c ,d"), ElementsAre("a", "b", "c", "d"));
}

TEST(ExpandHostlist, RangesKeepZeroPadding) {
  EXPECT_THAT(
      HostlistExpand("node[001-004,007]"),
      ElementsAre("node001", "node002", "node003", "node004", "node007"));
  EXPECT_THAT(HostlistExpand("n[08-11]"),
              ElementsAre("n08", "n09", "n10", "n11"));
  EXPECT_THAT(HostlistExpand("n[9-11]"), ElementsAre("n9", "n10", "n11"));
  EXPECT_THAT(HostlistExpand("n[98-100]"), ElementsAre("n98", "n99", "n100"));
  EXPECT_THAT(HostlistExpand("n[5]"), ElementsAre("n5"));
  EXPECT_THAT(HostlistExpand("[1-3]"), ElementsAre("1", "2", "3"));
}

TEST(ExpandHostlist, SuffixAfterBracket) {
  EXPECT_THAT(HostlistExpand("a[1-2]b"), ElementsAre("a1b", "a2b"));
  EXPECT_THAT(HostlistExpand("a[1-2]-ib"), ElementsAre("a1-ib", "a2-ib"));
}

TEST(ExpandHostlist, SeveralGroupsFirstVariesSlowest) {
  EXPECT_THAT(HostlistExpand("r[1-2]n[1-2]"),
              ElementsAre("r1n1", "r1n2", "r2n1", "r2n2"));
  EXPECT_THAT(HostlistExpand("r[1,3]n[01-02]x,login"),
              ElementsAre("r1n01x", "r1n02x", "r3n01x", "r3n02x", "login"));
}

TEST(ExpandHostlist, MixedItemsInOrderWithDuplicates) {
  EXPECT_THAT(HostlistExpand("b[2-3],a1,b2"),
              ElementsAre("b2", "b3", "a1", "b2"));
}

TEST(ExpandHostlist, RejectsEmpty) {
  EXPECT_THAT(HostlistExpandError(""), HasSubstr("empty"));
  EXPECT_THAT(HostlistExpandError("a,,b"),
              HasSubstr("empty item at position 2"));
  EXPECT_THAT(HostlistExpandError("a,"), HasSubstr("empty item"));
  EXPECT_THAT(HostlistExpandError(" , a"), HasSubstr("empty item"));
  EXPECT_THAT(HostlistExpandError("n[]"), HasSubstr("empty range"));
  EXPECT_THAT(HostlistExpandError("n[1,]"), HasSubstr("empty range"));
}

TEST(ExpandHostlist, RejectsUnbalancedBrackets) {
  EXPECT_THAT(HostlistExpandError("n[1-2"), HasSubstr("'[' without ']'"));
  EXPECT_THAT(HostlistExpandError("n1-2]"), HasSubstr("']' without '['"));
  EXPECT_THAT(HostlistExpandError("n[1[2]]"), HasSubstr("'[' without ']'"));
  EXPECT_THAT(HostlistExpandError("a,n[1-2,b"), HasSubstr("'n[1-2,b'"));
  EXPECT_THAT(HostlistExpandError("ok,n]1["), HasSubstr("position 4"));
}

TEST(ExpandHostlist, RejectsBadRanges) {
  EXPECT_THAT(HostlistExpandError("n[4-1]"), HasSubstr("'4-1' goes down"));
  EXPECT_THAT(HostlistExpandError("n[a-b]"),
              HasSubstr("'a-b' is not a number"));
  EXPECT_THAT(HostlistExpandError("n[1-]"), HasSubstr("not a number"));
  EXPECT_THAT(HostlistExpandError("n[-3]"), HasSubstr("not a number"));
  EXPECT_THAT(HostlistExpandError("n[1-2-3]"), HasSubstr("not a number"));
  EXPECT_THAT(HostlistExpandError("n[+1]"), HasSubstr("not a number"));
  EXPECT_THAT(HostlistExpandError("n[1234567890123456789]"),
              HasSubstr("at most 18 digits"));
  EXPECT_THAT(HostlistExpandError("no de"), HasSubstr("whitespace"));
}

TEST(ExpandHostlist, ErrorsNamePosition) {
  EXPECT_THAT(HostlistExpandError("a,b,c[9-1]"),
              HasSubstr("item 'c[9-1]' at position 6"));
}

TEST(ExpandHostlist, CapsExpansion) {
  EXPECT_THAT(HostlistExpandError("n[1-999999999999]"), HasSubstr("more than"));
  EXPECT_THAT(HostlistExpandError("a[1-1000]b[1-1000]c[1-2]"),
              HasSubstr("more than"));
  // The cap counts the whole list, not one item.
  EXPECT_THAT(HostlistExpandError("a[1-600000],b[1-600000]"),
              HasSubstr("'b[1-600000]'"));
  // Just under the cap is fine.
  absl::StatusOr<std::vector<std::string>> big =
      ExpandHostlist("a[1-1000]b[1-1000]");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->size(), kMaxHostlistNames);
}

TEST(CompressHostlist, Ranges) {
  EXPECT_EQ(CompressHostlist({"node001", "node002", "node003", "node007"}),
            "node[001-003,007]");
  EXPECT_EQ(CompressHostlist({"n08", "n09", "n10", "n11"}), "n[08-11]");
  EXPECT_EQ(CompressHostlist({"n9", "n10", "n11"}), "n[9-11]");
  EXPECT_EQ(CompressHostlist({"n7"}), "n7");
  EXPECT_EQ(CompressHostlist({"n1", "n3"}), "n[1,3]");
  EXPECT_EQ(CompressHostlist({}), "");
}

TEST(CompressHostlist, SortsAndRemovesDuplicates) {
  EXPECT_EQ(CompressHostlist({"n3", "n1", "n2", "n1", "n10"}), "n[1-3,10]");
}

TEST(CompressHostlist, PrefixesAndWidthsStaySeparate) {
  EXPECT_EQ(CompressHostlist({"gpu1", "cpu1", "cpu2", "gpu2"}),
            "cpu[1-2],gpu[1-2]");
  EXPECT_EQ(CompressHostlist({"n1", "n001", "n2", "n002"}), "n[1,001,2,002]");
  EXPECT_EQ(CompressHostlist({"n01", "n1"}), "n[1,01]");
  // 100 is written in full by a width-3 range: one range, as in Slurm.
  EXPECT_EQ(CompressHostlist({"n099", "n100"}), "n[099-100]");
  EXPECT_EQ(CompressHostlist({"n099", "n0100"}), "n[099,0100]");
}

TEST(CompressHostlist, NamesWithoutNumbers) {
  EXPECT_EQ(CompressHostlist({"login", "n1", "n", "a1b", "a2b"}),
            "a1b,a2b,login,n,n1");
  // Only digits: an empty prefix.
  EXPECT_EQ(CompressHostlist({"12", "11"}), "[11-12]");
  // More than 18 trailing digits is not a number.
  EXPECT_EQ(CompressHostlist({"n1234567890123456789"}), "n1234567890123456789");
}

TEST(SortHostlist, NaturalOrder) {
  EXPECT_THAT(SortHostlist({"n10", "n2", "n01", "n1", "m", "n", "n2"}),
              ElementsAre("m", "n", "n1", "n01", "n2", "n10"));
}

// Random host names over a small alphabet, so that prefixes, numbers and
// widths collide often.
std::vector<std::string> RandomHostlist(std::mt19937& rng) {
  static const char* kPrefixes[] = {"", "n", "node", "gpu-", "a1b", "r1n"};
  std::uniform_int_distribution<int> count(0, 40);
  std::uniform_int_distribution<int> prefix(0, 5);
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<int> number(0, 120);
  std::uniform_int_distribution<int> pad(0, 3);
  std::vector<std::string> hosts;
  const int n = count(rng);
  for (int i = 0; i < n; ++i) {
    std::string name = kPrefixes[prefix(rng)];
    if (kind(rng) == 0) {
      name += "x";  // no trailing number
    } else {
      std::string digits = std::to_string(number(rng));
      digits.insert(0, pad(rng) == 0 ? 1 : 0, '0');
      name += digits;
    }
    hosts.push_back(name);
  }
  return hosts;
}

TEST(CompressHostlist, RoundTripsThroughExpand) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::vector<std::string> hosts = RandomHostlist(rng);
    const std::string compressed = CompressHostlist(hosts);
    const std::vector<std::string> sorted = SortHostlist(hosts);
    if (sorted.empty()) {
      EXPECT_EQ(compressed, "");
      continue;
    }
    absl::StatusOr<std::vector<std::string>> expanded =
        ExpandHostlist(compressed);
    ASSERT_TRUE(expanded.ok()) << compressed << ": " << expanded.status();
    ASSERT_EQ(*expanded, sorted) << compressed;
    // Compressing is idempotent.
    EXPECT_EQ(CompressHostlist(*expanded), compressed);
  }
}

TEST(CompressHostlist, CompressesExpandedLists) {
  for (const char* list : {"node[001-003,007]", "n[08-11]", "n[9-12]",
                           "cpu[1-4],gpu[01-02]", "a1b,login,n[1-2,5]"}) {
    EXPECT_EQ(CompressHostlist(HostlistExpand(list)), list);
  }
}

}  // namespace
}  // namespace loom
