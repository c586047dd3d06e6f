#include "loom/common/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/loom-atomic-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static int Mode(const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return -1;
    return st.st_mode & 07777;
  }
  std::string dir_;
};

TEST_F(AtomicFileTest, WritesOwnerOnlyAndReplacesWhole) {
  const std::string path = dir_ + "/token";
  ASSERT_TRUE(WriteSecretFile(path, "first\n").ok());
  EXPECT_EQ(Read(path), "first\n");
  EXPECT_EQ(Mode(path), 0600);
  ASSERT_TRUE(WriteSecretFile(path, "second\n").ok());
  EXPECT_EQ(Read(path), "second\n");
  EXPECT_EQ(Mode(path), 0600);
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0) << "temporary file left";
}

TEST_F(AtomicFileTest, ALeftOverWorldReadableTemporaryDoesNotLeakTheMode) {
  const std::string path = dir_ + "/credential";
  { std::ofstream(path + ".tmp") << "stale"; }
  ASSERT_EQ(chmod((path + ".tmp").c_str(), 0644), 0);
  ASSERT_TRUE(WriteSecretFile(path, "secret\n").ok());
  EXPECT_EQ(Read(path), "secret\n");
  EXPECT_EQ(Mode(path), 0600);
}

TEST_F(AtomicFileTest, PlainFilesAreWorldReadableAndReplacedWhole) {
  const std::string path = dir_ + "/task.json";
  ASSERT_TRUE(WriteFileAtomically(path, "{}").ok());
  EXPECT_EQ(Mode(path), 0644);
  ASSERT_TRUE(WriteFileAtomically(path, "{\"a\": 1}").ok());
  EXPECT_EQ(Read(path), "{\"a\": 1}");
  ASSERT_TRUE(WriteFileAtomically(path, "", 0640).ok());
  EXPECT_EQ(Read(path), "");
  EXPECT_EQ(Mode(path), 0640);
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0) << "temporary file left";
}

TEST_F(AtomicFileTest, ErrorNamesThePathAndTheReason) {
  const std::string path = dir_ + "/missing/dir/token";
  absl::Status s = WriteSecretFile(path, "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
  EXPECT_THAT(std::string(s.message()), HasSubstr("No such file"));
}

}  // namespace
}  // namespace loom
