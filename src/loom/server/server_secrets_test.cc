#include "loom/server/server_secrets.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/server/server_command.h"
#include "loom/store/memory_state_store.h"
#include "loom/store/sqlite_state_store.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

class ServerSecretsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/loom-secrets-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  static mode_t ModeOf(const std::string& path) {
    struct stat st;
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }
  static void Write(const std::string& path, const std::string& text,
                    mode_t mode) {
    std::ofstream(path) << text;
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
  }

  std::string root_;
};

// Issue 15, item 2: the data dir is made 0700, the state files 0600 (and
// SQLite's -wal and -shm follow the database's mode).
TEST_F(ServerSecretsTest, TheDataDirAndItsFilesAreMadePrivate) {
  const std::string dir = root_ + "/a/data";
  const mode_t old_umask = ::umask(022);
  ASSERT_TRUE(PrepareDataDir(dir).ok());
  EXPECT_EQ(ModeOf(dir), 0700);
  ASSERT_TRUE(CreatePrivateFile(dir + "/state.db").ok());
  {
    auto store = SqliteStateStore::Open(dir + "/state.db");
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Commit({}, {Mutation::Put("/k", "v")}).ok());
    absl::StatusOr<SecretKeyLoad> key =
        LoadSecretKey(dir + "/secret.key", store->get());
    ASSERT_TRUE(key.ok()) << key.status();
    for (const char* f :
         {"/state.db", "/state.db-wal", "/state.db-shm", "/secret.key"}) {
      EXPECT_EQ(ModeOf(dir + f), 0600) << f;
    }
  }
  ::umask(old_umask);
  EXPECT_TRUE(PrepareDataDir(dir).ok());
}

// Issue 15, item 2: a data dir, or a file in it, that others may read is
// refused with its path and mode.
TEST_F(ServerSecretsTest, AReadableDataDirOrFileIsRefused) {
  const std::string dir = root_ + "/data";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  absl::Status st = PrepareDataDir(dir);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr(dir + " has mode 0755"));
  EXPECT_THAT(st.message(), HasSubstr("chmod 700 " + dir));
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  Write(dir + "/state.db-wal", "", 0644);
  st = PrepareDataDir(dir);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr(dir + "/state.db-wal has mode 0644"));
  ASSERT_EQ(::chmod((dir + "/state.db-wal").c_str(), 0600), 0);
  EXPECT_TRUE(PrepareDataDir(dir).ok());
  // Subdirectories (checkpoints) are not the server's secrets.
  ASSERT_EQ(::mkdir((dir + "/checkpoints").c_str(), 0755), 0);
  EXPECT_TRUE(PrepareDataDir(dir).ok());
}

// ... and `loom server` stops at start with exit status 2.
TEST_F(ServerSecretsTest, TheServerRefusesToStartOnAReadableDataDir) {
  const std::string dir = root_ + "/data";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  ServerFlags f;
  f.listen = "127.0.0.1:0";
  f.data_dir = dir;
  f.cluster = "small";
  EXPECT_EQ(RunServer(f), 2);
  EXPECT_FALSE(std::filesystem::exists(dir + "/state.db"));
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  Write(dir + "/state.db", "", 0644);
  EXPECT_EQ(RunServer(f), 2);
}

// Issue 15, item 2: the secret is in a 0600 file, not the store; an old
// store's is moved there.
TEST_F(ServerSecretsTest, TheSecretKeyLivesInAFileAndOldStoresAreMigrated) {
  MemoryStateStore store;
  const std::string legacy(64, 'a');
  ASSERT_TRUE(
      store.Commit({}, {Mutation::Put("/auth/cluster-secret", legacy)}).ok());
  const std::string path = root_ + "/secret.key";
  absl::StatusOr<SecretKeyLoad> key = LoadSecretKey(path, &store);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->key, legacy);
  EXPECT_THAT(key->note, HasSubstr("moved the cluster secret from the store"));
  EXPECT_EQ(ModeOf(path), 0600);
  EXPECT_EQ(store.Get("/auth/cluster-secret").status().code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<KeyValue>> all = store.List("");
  ASSERT_TRUE(all.ok());
  for (const KeyValue& kv : *all) {
    EXPECT_THAT(kv.value, ::testing::Not(HasSubstr(legacy))) << kv.key;
  }
  // The next start reads the file and says nothing.
  key = LoadSecretKey(path, &store);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->key, legacy);
  EXPECT_EQ(key->note, "");
  // Another server with no file, or another key, is refused.
  const std::string other = root_ + "/other.key";
  EXPECT_THAT(LoadSecretKey(other, &store).status().message(),
              HasSubstr("copy the secret key file"));
  Write(other, std::string(64, 'b') + "\n", 0600);
  EXPECT_THAT(LoadSecretKey(other, &store).status().message(),
              HasSubstr("is not the one this cluster's credentials were made "
                        "with"));
  // A key file others may read, or garbage, is refused.
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  EXPECT_THAT(LoadSecretKey(path, &store).status().message(),
              HasSubstr("has mode 0640"));
  Write(path, "not a key\n", 0600);
  EXPECT_FALSE(LoadSecretKey(path, &store).ok());
}

TEST_F(ServerSecretsTest, ANewClusterGetsANewKey) {
  MemoryStateStore store;
  const std::string path = root_ + "/secret.key";
  absl::StatusOr<SecretKeyLoad> key = LoadSecretKey(path, &store);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->key.size(), 64u);
  EXPECT_THAT(key->note, HasSubstr("made a new secret key"));
  EXPECT_EQ(ModeOf(path), 0600);
  // A second server sharing the file agrees.
  absl::StatusOr<SecretKeyLoad> again = LoadSecretKey(path, &store);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->key, key->key);
}

}  // namespace
}  // namespace loom
