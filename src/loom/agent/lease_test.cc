// The lease file (lease.h): written and read back to the millisecond, and
// nothing read from what is not a lease that fences.

#include "loom/agent/lease.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using agent_testing::TempDir;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(LeaseTest, RoundTripToTheMillisecond) {
  TempDir dir;
  const std::string path = dir.path() + "/lease";
  const Lease lease{absl::FromUnixMicros(int64_t{1700000000123456}),
                    absl::Milliseconds(1500)};
  ASSERT_TRUE(WriteLease(path, lease).ok());
  std::optional<Lease> back = ReadLease(path);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->last_ack_sent, absl::FromUnixMillis(int64_t{1700000000123}));
  EXPECT_EQ(back->fence_after, absl::Milliseconds(1500));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // A new lease replaces the old one.
  const Lease later{absl::FromUnixMillis(int64_t{1700000009000}),
                    absl::Seconds(30)};
  ASSERT_TRUE(WriteLease(path, later).ok());
  back = ReadLease(path);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->last_ack_sent, later.last_ack_sent);
  EXPECT_EQ(back->fence_after, absl::Seconds(30));
}

TEST(LeaseTest, NothingFromWhatIsNotALeaseThatFences) {
  TempDir dir;
  const std::string path = dir.path() + "/lease";
  EXPECT_FALSE(ReadLease(path).has_value());  // none
  for (const char* text :
       {"", "garbage", "[]", "{\"last_ack_sent_ms\": 5}",
        "{\"fence_after_ms\": 1000}",
        "{\"last_ack_sent_ms\": 5, \"fence_after_ms\": 0}",
        "{\"last_ack_sent_ms\": 5, \"fence_after_ms\": -1}",
        "{\"last_ack_sent_ms\": \"5\", \"fence_after_ms\": 1000}",
        "{\"last_ack_sent_ms\": 5, \"fence_after_ms\": 1.5}"}) {
    WriteText(path, text);
    EXPECT_FALSE(ReadLease(path).has_value()) << text;
  }
  WriteText(path, "{\"last_ack_sent_ms\": 5, \"fence_after_ms\": 1000}");
  ASSERT_TRUE(ReadLease(path).has_value());
  EXPECT_EQ(ReadLease(path)->last_ack_sent, absl::FromUnixMillis(5));
  // A lease that never fences, as written: nothing to read either.
  ASSERT_TRUE(
      WriteLease(path, Lease{absl::FromUnixMillis(5), absl::ZeroDuration()})
          .ok());
  EXPECT_FALSE(ReadLease(path).has_value());
  // A directory is no lease.
  EXPECT_FALSE(ReadLease(dir.path()).has_value());
}

TEST(LeaseTest, AWriteThatFailsNamesItsStep) {
  TempDir dir;
  const Lease lease{absl::FromUnixMillis(5), absl::Seconds(1)};
  absl::Status s = WriteLease(dir.path() + "/missing/lease", lease);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StartsWith(s.message(), "open: ")) << s;
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  // Renaming over a directory that is not empty fails after the open.
  const std::string path = dir.path() + "/lease";
  ASSERT_TRUE(fs::create_directories(path + "/in-the-way"));
  s = WriteLease(path, lease);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StartsWith(s.message(), "rename: ")) << s;
}

}  // namespace
}  // namespace loom
