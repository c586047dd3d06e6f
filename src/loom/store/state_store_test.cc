#include "loom/store/state_store.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/store/etcd_state_store.h"
#include "loom/store/fault_injecting_state_store.h"
#include "loom/store/memory_state_store.h"
#include "loom/store/sqlite_state_store.h"
#include "loom/store/testing/etcd_process.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

#define LOOM_CONCAT_INNER(a, b) a##b
#define LOOM_CONCAT(a, b) LOOM_CONCAT_INNER(a, b)
#define ASSERT_OK_AND_ASSIGN(lhs, expr)               \
  auto LOOM_CONCAT(status_or_, __LINE__) = (expr);    \
  ASSERT_TRUE(LOOM_CONCAT(status_or_, __LINE__).ok()) \
      << LOOM_CONCAT(status_or_, __LINE__).status();  \
  lhs = std::move(*LOOM_CONCAT(status_or_, __LINE__))
#define ASSERT_OK(expr)                               \
  do {                                                \
    const absl::Status loom_status_ = StatusOf(expr); \
    ASSERT_TRUE(loom_status_.ok()) << loom_status_;   \
  } while (0)

[[maybe_unused]] absl::Status StatusOf(const absl::Status& status) {
  return status;
}
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

// Comparable summaries, for readable expectations.
std::string Str(const KeyValue& kv) {
  return absl::StrCat(kv.key, "=", kv.value, "@", kv.version);
}
std::string Str(const Change& c) {
  return absl::StrCat(c.kind == Mutation::kPut ? "put " : "del ", c.key,
                      c.kind == Mutation::kPut ? "=" : "", c.value, "@",
                      c.revision);
}
template <typename T>
std::vector<std::string> Strs(const std::vector<T>& items) {
  std::vector<std::string> out;
  for (const T& item : items) out.push_back(Str(item));
  return out;
}

// A fresh temporary directory, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "loom_store_test_XXXXXX")
            .string();
    char* made = mkdtemp(tmpl.data());
    if (made == nullptr) std::abort();
    path_ = made;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(std::string_view name) const {
    return absl::StrCat(path_, "/", std::string(name));
  }

 private:
  std::string path_;
};

// One factory per implementation for the typed contract suite. `Make` builds
// a fresh, empty store named `name` inside `dir`.
struct MemoryFactory {
  static constexpr bool kCountsChangeLog = true;
  static absl::StatusOr<std::unique_ptr<StateStore>> Make(
      const TempDir& dir, std::string_view name, int64_t change_log_limit) {
    return std::make_unique<MemoryStateStore>(
        MemoryStateStoreOptions{.change_log_limit = change_log_limit});
  }
};

struct SqliteFactory {
  static constexpr bool kCountsChangeLog = true;
  static absl::StatusOr<std::unique_ptr<StateStore>> Make(
      const TempDir& dir, std::string_view name, int64_t change_log_limit) {
    absl::StatusOr<std::unique_ptr<SqliteStateStore>> store =
        SqliteStateStore::Open(dir.File(absl::StrCat(std::string(name), ".db")),
                               {.change_log_limit = change_log_limit});
    if (!store.ok()) return store.status();
    return std::unique_ptr<StateStore>(std::move(*store));
  }
};

// The decorator with no faults set must be invisible.
struct FaultInjectingFactory {
  static constexpr bool kCountsChangeLog = true;
  static absl::StatusOr<std::unique_ptr<StateStore>> Make(
      const TempDir& dir, std::string_view name, int64_t change_log_limit) {
    return std::make_unique<FaultInjectingStateStore>(
        std::make_unique<MemoryStateStore>(
            MemoryStateStoreOptions{.change_log_limit = change_log_limit}));
  }
};

template <typename Factory>
class StateStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<StateStore>> store =
        Factory::Make(dir_, "main", StateStore::kDefaultChangeLogLimit);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  // Puts one key unconditionally and returns the new revision (-1 on error,
  // which also fails the test).
  int64_t Put(std::string key, std::string value) {
    absl::StatusOr<int64_t> r =
        store_->Commit({}, {Mutation::Put(std::move(key), std::move(value))});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : -1;
  }
  int64_t Delete(std::string key) {
    absl::StatusOr<int64_t> r =
        store_->Commit({}, {Mutation::Delete(std::move(key))});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : -1;
  }
  int64_t CurrentRevision() {
    absl::StatusOr<int64_t> r = store_->Revision();
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : -1;
  }
  std::vector<std::string> ListStrs(std::string_view prefix,
                                    int64_t limit = 0) {
    absl::StatusOr<std::vector<KeyValue>> kvs = store_->List(prefix, limit);
    EXPECT_TRUE(kvs.ok()) << kvs.status();
    return kvs.ok() ? Strs(*kvs) : std::vector<std::string>{"<error>"};
  }
  std::vector<std::string> ChangeStrs(std::string_view prefix, int64_t revision,
                                      int64_t limit = 0) {
    absl::StatusOr<std::vector<Change>> changes =
        store_->ChangesSince(prefix, revision, limit);
    EXPECT_TRUE(changes.ok()) << changes.status();
    return changes.ok() ? Strs(*changes) : std::vector<std::string>{"<error>"};
  }

  TempDir dir_;
  std::unique_ptr<StateStore> store_;
};

// A store on a fresh single-member etcd of its own (so that revisions start
// at 0 as the contract says): the etcd process lives as long as the store.
class EtcdBackedStore final : public StateStore {
 public:
  EtcdBackedStore(testing::EtcdProcess etcd,
                  std::unique_ptr<EtcdStateStore> store)
      : etcd_(std::move(etcd)), store_(std::move(store)) {}
  absl::StatusOr<KeyValue> Get(std::string_view key) override {
    return store_->Get(key);
  }
  absl::StatusOr<std::vector<KeyValue>> List(std::string_view prefix,
                                             int64_t limit) override {
    return store_->List(prefix, limit);
  }
  absl::StatusOr<int64_t> Commit(
      const std::vector<Condition>& conditions,
      const std::vector<Mutation>& mutations) override {
    return store_->Commit(conditions, mutations);
  }
  absl::StatusOr<int64_t> Revision() override { return store_->Revision(); }
  absl::StatusOr<std::vector<Change>> ChangesSince(std::string_view prefix,
                                                   int64_t revision,
                                                   int64_t limit) override {
    return store_->ChangesSince(prefix, revision, limit);
  }
  testing::EtcdProcess& etcd() { return etcd_; }
  EtcdStateStore& store() { return *store_; }

 private:
  testing::EtcdProcess etcd_;
  std::unique_ptr<EtcdStateStore> store_;
};

absl::StatusOr<std::unique_ptr<EtcdBackedStore>> MakeEtcdStore(
    const TempDir& dir, std::string_view name, int members = 1) {
  absl::StatusOr<testing::EtcdProcess> etcd = testing::EtcdProcess::Start(
      dir.File(absl::StrCat("etcd-", std::string(name))), members);
  if (!etcd.ok()) return etcd.status();
  EtcdStateStoreOptions options;
  options.client.endpoints = etcd->endpoints();
  options.key_prefix = "/test/data";
  absl::StatusOr<std::unique_ptr<EtcdStateStore>> store =
      EtcdStateStore::Connect(options);
  if (!store.ok()) return store.status();
  return std::make_unique<EtcdBackedStore>(*std::move(etcd), *std::move(store));
}

struct EtcdFactory {
  // etcd's history is bounded by compaction, not by a count of changes
  // (see EtcdStateStoreTest.CompactedHistoryIsOutOfRange).
  static constexpr bool kCountsChangeLog = false;
  static absl::StatusOr<std::unique_ptr<StateStore>> Make(
      const TempDir& dir, std::string_view name, int64_t change_log_limit) {
    absl::StatusOr<std::unique_ptr<EtcdBackedStore>> store =
        MakeEtcdStore(dir, name);
    if (!store.ok()) return store.status();
    return std::unique_ptr<StateStore>(std::move(*store));
  }
};

using Factories = ::testing::Types<MemoryFactory, SqliteFactory,
                                   FaultInjectingFactory, EtcdFactory>;
TYPED_TEST_SUITE(StateStoreTest, Factories);

TYPED_TEST(StateStoreTest, EmptyStore) {
  EXPECT_EQ(this->CurrentRevision(), 0);
  EXPECT_EQ(this->store_->Get("a").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(this->ListStrs(""), IsEmpty());
  EXPECT_THAT(this->ChangeStrs("", 0), IsEmpty());
}

TYPED_TEST(StateStoreTest, PutGetDelete) {
  EXPECT_EQ(this->Put("jobs/1", "one"), 1);
  ASSERT_OK_AND_ASSIGN(KeyValue kv, this->store_->Get("jobs/1"));
  EXPECT_EQ(Str(kv), "jobs/1=one@1");

  EXPECT_EQ(this->Put("jobs/1", "uno"), 2);
  ASSERT_OK_AND_ASSIGN(kv, this->store_->Get("jobs/1"));
  EXPECT_EQ(Str(kv), "jobs/1=uno@2");

  EXPECT_EQ(this->Delete("jobs/1"), 3);
  absl::StatusOr<KeyValue> gone = this->store_->Get("jobs/1");
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr("jobs/1"));

  // Deleting an absent key is fine and changes nothing, not even the
  // revision.
  EXPECT_EQ(this->Delete("jobs/1"), 3);
  EXPECT_EQ(this->Delete("never"), 3);
  EXPECT_EQ(this->CurrentRevision(), 3);
}

TYPED_TEST(StateStoreTest, EmptyValuesAndBinaryKeys) {
  const std::string binary_key("k\0\xff\x01", 4);
  const std::string binary_value("\0\0\xfe", 3);
  this->Put("empty", "");
  this->Put(binary_key, binary_value);
  ASSERT_OK_AND_ASSIGN(KeyValue kv, this->store_->Get("empty"));
  EXPECT_EQ(kv.value, "");
  ASSERT_OK_AND_ASSIGN(kv, this->store_->Get(binary_key));
  EXPECT_EQ(kv.key, binary_key);
  EXPECT_EQ(kv.value, binary_value);
  // A key that differs only after the NUL byte is another key.
  EXPECT_EQ(this->store_->Get(std::string("k\0", 2)).status().code(),
            absl::StatusCode::kNotFound);
}

TYPED_TEST(StateStoreTest, ListByPrefixInKeyOrder) {
  for (const char* key : {"jobs/3", "jobs/1", "nodes/a", "jobs/10", "jobs",
                          "jobsx", "job/1", "jobs/2"}) {
    this->Put(key, "v");
  }
  EXPECT_THAT(this->ListStrs("jobs/"), ElementsAre("jobs/1=v@2", "jobs/10=v@4",
                                                   "jobs/2=v@8", "jobs/3=v@1"));
  EXPECT_THAT(this->ListStrs("jobs/", 2),
              ElementsAre("jobs/1=v@2", "jobs/10=v@4"));
  EXPECT_THAT(this->ListStrs("jobs"),
              ElementsAre("jobs=v@5", "jobs/1=v@2", "jobs/10=v@4", "jobs/2=v@8",
                          "jobs/3=v@1", "jobsx=v@6"));
  EXPECT_THAT(this->ListStrs("nodes/"), ElementsAre("nodes/a=v@3"));
  EXPECT_THAT(this->ListStrs("zzz"), IsEmpty());
  ASSERT_OK_AND_ASSIGN(std::vector<KeyValue> all, this->store_->List(""));
  ASSERT_EQ(all.size(), 8u);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LT(all[i - 1].key, all[i].key);
  ASSERT_OK_AND_ASSIGN(all, this->store_->List("", 3));
  EXPECT_EQ(all.size(), 3u);
}

TYPED_TEST(StateStoreTest, KeysOrderBytewise) {
  // High bytes sort after low ones (unsigned), and a prefix of 0xff bytes
  // has no upper bound.
  const std::string k7f("a\x7f"), k80("a\x80"), kff("a\xff"),
      kffff("a\xff\xff"), ff("\xff"), ff01("\xff\x01");
  for (const std::string& key : {kffff, k80, ff01, kff, k7f, ff}) {
    this->Put(key, "v");
  }
  ASSERT_OK_AND_ASSIGN(std::vector<KeyValue> kvs, this->store_->List("a"));
  std::vector<std::string> keys;
  for (const KeyValue& kv : kvs) keys.push_back(kv.key);
  EXPECT_THAT(keys, ElementsAre(k7f, k80, kff, kffff));
  ASSERT_OK_AND_ASSIGN(kvs, this->store_->List("a\xff"));
  EXPECT_EQ(kvs.size(), 2u);
  ASSERT_OK_AND_ASSIGN(kvs, this->store_->List(ff));
  ASSERT_EQ(kvs.size(), 2u);
  EXPECT_EQ(kvs[0].key, ff);
  EXPECT_EQ(kvs[1].key, ff01);
  ASSERT_OK_AND_ASSIGN(std::vector<Change> changes,
                       this->store_->ChangesSince(ff, 0, 0));
  EXPECT_EQ(changes.size(), 2u);
}

TYPED_TEST(StateStoreTest, VersionsAndRevisionMonotonic) {
  int64_t last = this->CurrentRevision();
  for (int i = 0; i < 20; ++i) {
    int64_t r = this->Put(absl::StrCat("k", i % 3), absl::StrCat(i));
    EXPECT_EQ(r, last + 1);
    EXPECT_EQ(this->CurrentRevision(), r);
    ASSERT_OK_AND_ASSIGN(KeyValue kv,
                         this->store_->Get(absl::StrCat("k", i % 3)));
    EXPECT_EQ(kv.version, r);
    last = r;
  }
  // Every key written by one commit gets that commit's revision; keys not
  // written keep theirs.
  ASSERT_OK_AND_ASSIGN(KeyValue untouched, this->store_->Get("k0"));
  ASSERT_OK_AND_ASSIGN(
      int64_t r, this->store_->Commit(
                     {}, {Mutation::Put("k1", "x"), Mutation::Put("new", "y"),
                          Mutation::Delete("k2")}));
  EXPECT_EQ(r, last + 1);
  EXPECT_THAT(this->ListStrs(""),
              ElementsAre(Str(untouched), absl::StrCat("k1=x@", r),
                          absl::StrCat("new=y@", r)));
}

TYPED_TEST(StateStoreTest, ConditionalCommitOnExactVersion) {
  const int64_t v1 = this->Put("cfg", "a");
  this->Put("other", "o");

  // The matching version wins.
  ASSERT_OK_AND_ASSIGN(
      int64_t v2,
      this->store_->Commit({{"cfg", v1}}, {Mutation::Put("cfg", "b")}));
  EXPECT_EQ(v2, v1 + 2);

  // A stale version loses, names the key and both versions, and applies
  // nothing (not even the mutations of other keys).
  absl::StatusOr<int64_t> stale = this->store_->Commit(
      {{"cfg", v1}}, {Mutation::Put("cfg", "c"), Mutation::Put("x", "x"),
                      Mutation::Delete("other")});
  ASSERT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.status().message(), HasSubstr("\"cfg\""));
  EXPECT_THAT(stale.status().message(),
              HasSubstr(absl::StrCat("expected version ", v1)));
  EXPECT_THAT(stale.status().message(),
              HasSubstr(absl::StrCat("actual version ", v2)));
  EXPECT_EQ(this->CurrentRevision(), v2);
  EXPECT_THAT(this->ListStrs(""),
              ElementsAre(absl::StrCat("cfg=b@", v2), "other=o@2"));
  EXPECT_THAT(this->ChangeStrs("", v2), IsEmpty());

  // A condition on a key that is not mutated guards the commit too.
  ASSERT_OK(this->store_->Commit({{"other", 2}}, {Mutation::Put("x", "1")}));
  EXPECT_EQ(this->store_->Commit({{"other", 1}}, {Mutation::Put("x", "2")})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TYPED_TEST(StateStoreTest, MustNotExistAndMustExist) {
  // Create-if-absent: the first wins, the second sees the key.
  ASSERT_OK(this->store_->Commit({{"lock", Condition::kMustNotExist}},
                                 {Mutation::Put("lock", "owner1")}));
  absl::StatusOr<int64_t> second = this->store_->Commit(
      {{"lock", Condition::kMustNotExist}}, {Mutation::Put("lock", "owner2")});
  ASSERT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("lock"));
  ASSERT_OK_AND_ASSIGN(KeyValue kv, this->store_->Get("lock"));
  EXPECT_EQ(kv.value, "owner1");

  // Must-exist holds for any version and fails for an absent key.
  this->Put("lock", "owner1-again");
  ASSERT_OK(this->store_->Commit({{"lock", Condition::kMustExist}},
                                 {Mutation::Put("seen", "1")}));
  absl::StatusOr<int64_t> absent = this->store_->Commit(
      {{"nope", Condition::kMustExist}}, {Mutation::Put("seen", "2")});
  ASSERT_EQ(absent.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(absent.status().message(), HasSubstr("nope"));

  // A deleted key no longer exists.
  this->Delete("lock");
  ASSERT_OK(this->store_->Commit({{"lock", Condition::kMustNotExist}},
                                 {Mutation::Put("lock", "owner2")}));
}

TYPED_TEST(StateStoreTest, ConditionsOnlyCommitKeepsRevision) {
  const int64_t r = this->Put("a", "1");
  ASSERT_OK_AND_ASSIGN(int64_t got, this->store_->Commit({{"a", r}}, {}));
  EXPECT_EQ(got, r);
  ASSERT_OK_AND_ASSIGN(got, this->store_->Commit({}, {}));
  EXPECT_EQ(got, r);
  EXPECT_EQ(this->CurrentRevision(), r);
  EXPECT_EQ(this->store_->Commit({{"a", r + 1}}, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TYPED_TEST(StateStoreTest, MultiKeyCommitIsAtomic) {
  // Move a job from the pending set to the running set in one commit.
  const int64_t r1 = this->Put("pending/7", "job7");
  ASSERT_OK_AND_ASSIGN(
      int64_t r2,
      this->store_->Commit(
          {{"pending/7", r1}, {"running/7", Condition::kMustNotExist}},
          {Mutation::Delete("pending/7"), Mutation::Put("running/7", "job7"),
           Mutation::Put("nodes/n1/gpus", "0-7")}));
  EXPECT_EQ(r2, r1 + 1);
  EXPECT_THAT(this->ListStrs(""),
              ElementsAre(absl::StrCat("nodes/n1/gpus=0-7@", r2),
                          absl::StrCat("running/7=job7@", r2)));

  // Several keys and a failing last condition: none of them is written.
  absl::StatusOr<int64_t> failed = this->store_->Commit(
      {{"running/7", r2}, {"nodes/n1/gpus", r2}, {"pending/7", r1}},
      {Mutation::Put("a", "1"), Mutation::Put("b", "2"),
       Mutation::Delete("running/7")});
  ASSERT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(failed.status().message(), HasSubstr("pending/7"));
  EXPECT_EQ(this->CurrentRevision(), r2);
  EXPECT_THAT(this->ListStrs(""),
              ElementsAre(absl::StrCat("nodes/n1/gpus=0-7@", r2),
                          absl::StrCat("running/7=job7@", r2)));
}

TYPED_TEST(StateStoreTest, ChangesSinceInOrder) {
  ASSERT_EQ(this->Put("a/1", "x"), 1);
  ASSERT_OK(this->store_->Commit(
      {}, {Mutation::Put("a/2", "y"), Mutation::Put("b/1", "z")}));
  ASSERT_EQ(this->Delete("a/1"), 3);
  ASSERT_EQ(this->Delete("a/absent"), 3);  // no change, no log entry
  ASSERT_OK(this->store_->Commit(
      {}, {Mutation::Put("b/2", "w"), Mutation::Put("a/3", "v")}));

  EXPECT_THAT(
      this->ChangeStrs("a/", 0),
      ElementsAre("put a/1=x@1", "put a/2=y@2", "del a/1@3", "put a/3=v@4"));
  EXPECT_THAT(this->ChangeStrs("", 1),
              ElementsAre("put a/2=y@2", "put b/1=z@2", "del a/1@3",
                          "put b/2=w@4", "put a/3=v@4"));
  EXPECT_THAT(this->ChangeStrs("b/", 2), ElementsAre("put b/2=w@4"));
  // A limit never splits a commit.
  EXPECT_THAT(this->ChangeStrs("", 0, 1), ElementsAre("put a/1=x@1"));
  EXPECT_THAT(this->ChangeStrs("", 1, 1),
              ElementsAre("put a/2=y@2", "put b/1=z@2"));
  EXPECT_THAT(this->ChangeStrs("", 1, 3),
              ElementsAre("put a/2=y@2", "put b/1=z@2", "del a/1@3"));
  // At or past the current revision: nothing yet.
  EXPECT_THAT(this->ChangeStrs("", 4), IsEmpty());
  EXPECT_THAT(this->ChangeStrs("", 1000), IsEmpty());

  // Following the log page by page sees every change exactly once.
  std::vector<std::string> followed;
  int64_t from = 0;
  for (int guard = 0; guard < 10; ++guard) {
    ASSERT_OK_AND_ASSIGN(std::vector<Change> page,
                         this->store_->ChangesSince("", from, 1));
    if (page.empty()) break;
    for (const Change& c : page) followed.push_back(Str(c));
    from = page.back().revision;
  }
  EXPECT_EQ(followed, this->ChangeStrs("", 0));
}

TYPED_TEST(StateStoreTest, ChangesSinceOutOfRangeOnceDropped) {
  if constexpr (!TypeParam::kCountsChangeLog) {
    GTEST_SKIP() << "this store's history is not bounded by a change count";
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StateStore> small,
                       TypeParam::Make(this->dir_, "small", 10));
  for (int i = 1; i <= 30; ++i) {
    ASSERT_OK(small->Commit({}, {Mutation::Put(absl::StrCat("k", i), "v")}));
  }
  // The log holds the last 10 changes: revisions 21..30.
  absl::StatusOr<std::vector<Change>> old = small->ChangesSince("", 19, 0);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(small->ChangesSince("", 0, 0).status().code(),
            absl::StatusCode::kOutOfRange);
  ASSERT_OK_AND_ASSIGN(std::vector<Change> kept,
                       small->ChangesSince("", 20, 0));
  ASSERT_EQ(kept.size(), 10u);
  EXPECT_EQ(kept.front().revision, 21);
  EXPECT_EQ(kept.back().revision, 30);

  // Whole commits are dropped: 4-key commits leave 2 commits (8 changes).
  for (int i = 0; i < 5; ++i) {
    std::vector<Mutation> ms;
    for (int j = 0; j < 4; ++j) {
      ms.push_back(Mutation::Put(absl::StrCat("m", i, "/", j), "v"));
    }
    ASSERT_OK(small->Commit({}, ms));
  }
  EXPECT_EQ(small->ChangesSince("", 32, 0).status().code(),
            absl::StatusCode::kOutOfRange);
  ASSERT_OK_AND_ASSIGN(kept, small->ChangesSince("", 33, 0));
  ASSERT_EQ(kept.size(), 8u);
  EXPECT_EQ(kept.front().revision, 34);
  EXPECT_EQ(kept.back().revision, 35);
  // The data itself is all there.
  ASSERT_OK_AND_ASSIGN(std::vector<KeyValue> all, small->List(""));
  EXPECT_EQ(all.size(), 50u);
}

TYPED_TEST(StateStoreTest, InvalidArgumentsChangeNothing) {
  this->Put("a", "1");
  const auto code = [](const auto& status_or) {
    return status_or.status().code();
  };
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  const std::string max_key(StateStore::kMaxKeyBytes, 'k');
  const std::string long_key(StateStore::kMaxKeyBytes + 1, 'k');
  std::string big_value(StateStore::kMaxValueBytes + 1, 'v');

  EXPECT_EQ(code(this->store_->Get("")), kInvalid);
  EXPECT_EQ(code(this->store_->Get(long_key)), kInvalid);
  EXPECT_EQ(code(this->store_->Commit({}, {Mutation::Put("", "x")})), kInvalid);
  EXPECT_EQ(code(this->store_->Commit({}, {Mutation::Delete("")})), kInvalid);
  EXPECT_EQ(code(this->store_->Commit({}, {Mutation::Put(long_key, "x")})),
            kInvalid);
  EXPECT_EQ(code(this->store_->Commit({}, {Mutation::Put("b", "x"),
                                           Mutation::Put("big", big_value)})),
            kInvalid);
  EXPECT_EQ(code(this->store_->Commit({{"", 0}}, {Mutation::Put("b", "x")})),
            kInvalid);
  EXPECT_EQ(code(this->store_->Commit({{"a", -2}}, {Mutation::Put("b", "x")})),
            kInvalid);
  absl::StatusOr<int64_t> dup = this->store_->Commit(
      {}, {Mutation::Put("b", "x"), Mutation::Delete("b")});
  EXPECT_EQ(code(dup), kInvalid);
  EXPECT_THAT(dup.status().message(), HasSubstr("\"b\""));
  EXPECT_EQ(code(this->store_->List("", -1)), kInvalid);
  EXPECT_EQ(code(this->store_->List(long_key)), kInvalid);
  EXPECT_EQ(code(this->store_->ChangesSince("", -1, 0)), kInvalid);
  EXPECT_EQ(code(this->store_->ChangesSince("", 0, -1)), kInvalid);
  EXPECT_EQ(this->CurrentRevision(), 1);
  EXPECT_THAT(this->ListStrs(""), ElementsAre("a=1@1"));

  // The limits themselves are allowed.
  big_value.pop_back();
  ASSERT_OK(this->store_->Commit(
      {}, {Mutation::Put(max_key, "x"), Mutation::Put("big", big_value)}));
  ASSERT_OK_AND_ASSIGN(KeyValue kv, this->store_->Get("big"));
  EXPECT_EQ(kv.value.size(), static_cast<size_t>(StateStore::kMaxValueBytes));
  ASSERT_OK_AND_ASSIGN(kv, this->store_->Get(max_key));
  EXPECT_EQ(kv.value, "x");
}

// Many writers at once (the SQLite store writes them as groups): each
// commit succeeds or fails on its own conditions only, and every successful
// one gets a revision of its own.
TYPED_TEST(StateStoreTest, ConcurrentCommitsKeepTheirOwnOutcome) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 20;
  StateStore* store = this->store_.get();
  std::vector<std::vector<int64_t>> revisions(kThreads);
  std::vector<int> won(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        // Everyone races for "race/r"; only one may create it.
        absl::StatusOr<int64_t> a = store->Commit(
            {{absl::StrCat("race/", r), Condition::kMustNotExist}},
            {Mutation::Put(absl::StrCat("race/", r), absl::StrCat(t))});
        if (a.ok()) {
          ++won[t];
          revisions[t].push_back(*a);
        } else {
          EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
        }
        // A key of its own always goes in.
        absl::StatusOr<int64_t> b = store->Commit(
            {}, {Mutation::Put(absl::StrCat("own/", t, "/", r), "x")});
        ASSERT_TRUE(b.ok()) << b.status();
        revisions[t].push_back(*b);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  int total_won = 0;
  std::set<int64_t> all;
  for (int t = 0; t < kThreads; ++t) {
    total_won += won[t];
    for (int64_t rev : revisions[t]) EXPECT_TRUE(all.insert(rev).second) << rev;
  }
  EXPECT_EQ(total_won, kRounds);
  EXPECT_EQ(all.size(), static_cast<size_t>(kRounds + kThreads * kRounds));
  absl::StatusOr<std::vector<KeyValue>> own = store->List("own/");
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->size(), static_cast<size_t>(kThreads * kRounds));
}

TYPED_TEST(StateStoreTest, ConcurrentCasIncrementsLoseNothing) {
  constexpr int kThreads = 4;
  constexpr int kIncrements = 25;
  std::atomic<int> conflicts{0};
  std::atomic<bool> failed{false};
  std::atomic<bool> done{false};
  StateStore* store = this->store_.get();

  auto increment = [&](int thread) {
    for (int i = 0; i < kIncrements && !failed; ++i) {
      while (!failed) {
        absl::StatusOr<KeyValue> kv = store->Get("counter");
        int64_t value = 0, version = Condition::kMustNotExist;
        if (kv.ok()) {
          if (!absl::SimpleAtoi(kv->value, &value)) failed = true;
          version = kv->version;
        } else if (kv.status().code() != absl::StatusCode::kNotFound) {
          failed = true;
          break;
        }
        absl::StatusOr<int64_t> r = store->Commit(
            {{"counter", version}},
            {Mutation::Put("counter", absl::StrCat(value + 1)),
             Mutation::Put(absl::StrCat("by/", thread, "/", i), "")});
        if (r.ok()) break;
        if (r.status().code() != absl::StatusCode::kFailedPrecondition) {
          ADD_FAILURE() << r.status();
          failed = true;
        }
        ++conflicts;
      }
    }
  };
  // A reader lists concurrently and must always see a consistent snapshot:
  // the counter equals the number of `by/` keys.
  auto reader = [&] {
    while (!done && !failed) {
      absl::StatusOr<std::vector<KeyValue>> all = store->List("");
      if (!all.ok()) {
        ADD_FAILURE() << all.status();
        failed = true;
        return;
      }
      int64_t counter = 0, by = 0;
      for (const KeyValue& kv : *all) {
        if (kv.key == "counter") (void)absl::SimpleAtoi(kv.value, &counter);
        if (kv.key.rfind("by/", 0) == 0) ++by;
      }
      if (counter != by) {
        ADD_FAILURE() << "counter " << counter << " but " << by << " keys";
        failed = true;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(increment, t);
  std::thread reader_thread(reader);
  for (std::thread& t : threads) t.join();
  done = true;
  reader_thread.join();
  ASSERT_FALSE(failed);

  ASSERT_OK_AND_ASSIGN(KeyValue kv, this->store_->Get("counter"));
  EXPECT_EQ(kv.value, absl::StrCat(kThreads * kIncrements));
  EXPECT_EQ(this->CurrentRevision(), kThreads * kIncrements);
  ASSERT_OK_AND_ASSIGN(std::vector<Change> changes,
                       this->store_->ChangesSince("counter", 0, 0));
  ASSERT_EQ(changes.size(), static_cast<size_t>(kThreads * kIncrements));
  for (size_t i = 0; i < changes.size(); ++i) {
    EXPECT_EQ(changes[i].value, absl::StrCat(i + 1));
  }
}

// --- SQLite only --------------------------------------------------------

TEST(SqliteStateStoreTest, DataAndRevisionSurviveReopen) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqliteStateStore> store,
                         SqliteStateStore::Open(path, {.change_log_limit = 5}));
    for (int i = 1; i <= 8; ++i) {
      ASSERT_OK(store->Commit(
          {}, {Mutation::Put(absl::StrCat("k", i), absl::StrCat("v", i))}));
    }
    ASSERT_OK(store->Commit({}, {Mutation::Delete("k1")}));
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqliteStateStore> store,
                       SqliteStateStore::Open(path, {.change_log_limit = 5}));
  EXPECT_EQ(store->path(), path);
  ASSERT_OK_AND_ASSIGN(int64_t revision, store->Revision());
  EXPECT_EQ(revision, 9);
  ASSERT_OK_AND_ASSIGN(KeyValue kv, store->Get("k8"));
  EXPECT_EQ(Str(kv), "k8=v8@8");
  EXPECT_EQ(store->Get("k1").status().code(), absl::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(std::vector<KeyValue> all, store->List(""));
  EXPECT_EQ(all.size(), 7u);
  // The change log and its compaction point persist too.
  EXPECT_EQ(store->ChangesSince("", 3, 0).status().code(),
            absl::StatusCode::kOutOfRange);
  ASSERT_OK_AND_ASSIGN(std::vector<Change> changes,
                       store->ChangesSince("", 4, 0));
  EXPECT_THAT(Strs(changes),
              ElementsAre("put k5=v5@5", "put k6=v6@6", "put k7=v7@7",
                          "put k8=v8@8", "del k1@9"));
  // And the revision carries on.
  ASSERT_OK_AND_ASSIGN(revision,
                       store->Commit({{"k8", 8}}, {Mutation::Put("k8", "x")}));
  EXPECT_EQ(revision, 10);
}

TEST(SqliteStateStoreTest, UsesWalJournal) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqliteStateStore> store,
                       SqliteStateStore::Open(path));
  ASSERT_OK(store->Commit({}, {Mutation::Put("a", "1")}));
  EXPECT_TRUE(std::filesystem::exists(path + "-wal"));
  // The journal mode is stored in the file; look from a second connection.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)),
               "wal");
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

// The durability promise, tested the hard way: a child process commits keys
// one by one and reports each `Commit` that returned OK on a pipe; the parent
// SIGKILLs it mid-stream, reopens the file, and every reported key must be
// there. Each commit also moves `kill/last` to its index, so the file must
// hold exactly keys 0..last: no torn commit.
TEST(SqliteStateStoreTest, SigkillAfterCommitLosesNothing) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  constexpr int kKillAfter = 150;
  auto key = [](int k) { return absl::StrFormat("kill/%06d", k); };

  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    absl::StatusOr<std::unique_ptr<SqliteStateStore>> store =
        SqliteStateStore::Open(path);
    if (!store.ok()) _exit(2);
    for (int k = 0; k < 1'000'000; ++k) {
      absl::StatusOr<int64_t> r = (*store)->Commit(
          {}, {Mutation::Put(key(k), absl::StrCat("value ", k)),
               Mutation::Put("kill/last", absl::StrCat(k))});
      if (!r.ok()) _exit(3);
      const std::string line = absl::StrCat("done ", k, "\n");
      if (write(fds[1], line.data(), line.size()) !=
          static_cast<ssize_t>(line.size())) {
        _exit(4);
      }
    }
    _exit(0);
  }
  close(fds[1]);
  // If an assertion below bails out early, do not leave the child running.
  struct ChildReaper {
    pid_t pid;
    bool reaped = false;
    ~ChildReaper() {
      if (!reaped) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } reaper{child};

  // Read reports until enough arrived, then kill; afterwards drain what the
  // child wrote before it died (those commits were reported too).
  std::string received;
  int reported = 0;
  bool killed = false;
  char buf[4096];
  for (;;) {
    pollfd pfd{fds[0], POLLIN, 0};
    int ready = poll(&pfd, 1, 30'000);
    ASSERT_GT(ready, 0) << "child stopped reporting";
    ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;  // EOF: the child is gone
    received.append(buf, n);
    reported =
        static_cast<int>(std::count(received.begin(), received.end(), '\n'));
    if (!killed && reported >= kKillAfter) {
      ASSERT_EQ(kill(child, SIGKILL), 0);
      killed = true;
    }
  }
  close(fds[0]);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  reaper.reaped = true;
  ASSERT_TRUE(killed) << "child exited early, status " << wstatus;
  ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
      << "child status " << wstatus;

  int max_done = -1;
  for (absl::string_view line :
       absl::StrSplit(received, '\n', absl::SkipEmpty())) {
    int k = 0;
    ASSERT_TRUE(absl::ConsumePrefix(&line, "done ") &&
                absl::SimpleAtoi(line, &k))
        << line;
    EXPECT_EQ(k, max_done + 1);
    max_done = k;
  }
  ASSERT_GE(max_done + 1, kKillAfter);

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqliteStateStore> store,
                       SqliteStateStore::Open(path));
  ASSERT_OK_AND_ASSIGN(KeyValue last, store->Get("kill/last"));
  int last_index = 0;
  ASSERT_TRUE(absl::SimpleAtoi(last.value, &last_index));
  EXPECT_GE(last_index, max_done);  // one more may have committed unreported
  ASSERT_OK_AND_ASSIGN(std::vector<KeyValue> keys, store->List("kill/0"));
  ASSERT_EQ(static_cast<int>(keys.size()), last_index + 1);
  for (int k = 0; k <= last_index; ++k) {
    EXPECT_EQ(keys[k].key, key(k));
    EXPECT_EQ(keys[k].value, absl::StrCat("value ", k));
    EXPECT_EQ(keys[k].version, k + 1);
  }
  ASSERT_OK_AND_ASSIGN(int64_t revision, store->Revision());
  EXPECT_EQ(revision, last_index + 1);
}

TEST(SqliteStateStoreTest, GarbageFileFailsCleanly) {
  TempDir dir;
  const std::string path = dir.File("garbage.db");
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 4096; ++i) out << "this is not a database " << i;
  }
  absl::StatusOr<std::unique_ptr<SqliteStateStore>> store =
      SqliteStateStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss)
      << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr(path));
  EXPECT_THAT(store.status().message(), HasSubstr("not a database"));
}

TEST(SqliteStateStoreTest, UnopenablePathFailsCleanly) {
  TempDir dir;
  const std::string missing_dir = dir.File("no/such/dir/state.db");
  absl::StatusOr<std::unique_ptr<SqliteStateStore>> store =
      SqliteStateStore::Open(missing_dir);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr(missing_dir));

  // A directory is not a database file either.
  store = SqliteStateStore::Open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr(dir.path()));

  EXPECT_EQ(SqliteStateStore::Open("").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SqliteStateStoreTest, ForeignDatabaseIsRejected) {
  TempDir dir;
  const std::string path = dir.File("other.db");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "PRAGMA application_id = 42;"
                         "CREATE TABLE t (x INTEGER);",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  absl::StatusOr<std::unique_ptr<SqliteStateStore>> store =
      SqliteStateStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(path));
  EXPECT_THAT(store.status().message(), HasSubstr("not a loom state store"));

  // Without an application id, foreign tables give it away.
  const std::string unmarked = dir.File("unmarked.db");
  ASSERT_EQ(sqlite3_open(unmarked.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t (x INTEGER);", nullptr, nullptr,
                         nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  store = SqliteStateStore::Open(unmarked);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(unmarked));
}

// --- FaultInjectingStateStore --------------------------------------------

TEST(FaultInjectingStateStoreTest, FailsNextCommitsThenRecovers) {
  MemoryStateStore memory;
  FaultInjectingStateStore store(&memory);
  store.FailNextCommits(2, absl::UnavailableError("injected"));
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<int64_t> r = store.Commit({}, {Mutation::Put("a", "1")});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(r.status().message(), HasSubstr("injected"));
  }
  EXPECT_EQ(store.injected_commit_failures(), 2);
  // Nothing reached the target.
  ASSERT_OK_AND_ASSIGN(int64_t revision, memory.Revision());
  EXPECT_EQ(revision, 0);
  // Reads were not affected, and the third commit goes through.
  EXPECT_EQ(store.Get("a").status().code(), absl::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(revision, store.Commit({}, {Mutation::Put("a", "1")}));
  EXPECT_EQ(revision, 1);
  EXPECT_EQ(store.injected_read_failures(), 0);
}

TEST(FaultInjectingStateStoreTest, FailureAfterApplyHidesASuccess) {
  MemoryStateStore memory;
  FaultInjectingStateStore store(&memory);
  store.FailNextCommits(1, absl::DeadlineExceededError("reply lost"),
                        FaultInjectingStateStore::CommitFault::kAfterApply);
  EXPECT_EQ(store.Commit({{"a", 0}}, {Mutation::Put("a", "1")}).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // The write happened; a caller that retries blindly now fails its
  // condition, so it must re-read.
  ASSERT_OK_AND_ASSIGN(KeyValue kv, store.Get("a"));
  EXPECT_EQ(kv.value, "1");
  EXPECT_EQ(store.Commit({{"a", 0}}, {Mutation::Put("a", "1")}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(FaultInjectingStateStoreTest, FailsNextReads) {
  FaultInjectingStateStore store(std::make_unique<MemoryStateStore>());
  ASSERT_OK(store.Commit({}, {Mutation::Put("a", "1")}));
  store.FailNextReads(4, absl::UnavailableError("injected read"));
  EXPECT_EQ(store.Get("a").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.List("").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.Revision().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.ChangesSince("", 0, 0).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.injected_read_failures(), 4);
  // Commits are not reads.
  store.FailNextReads(1, absl::UnavailableError("injected read"));
  ASSERT_OK(store.Commit({}, {Mutation::Put("b", "2")}));
  EXPECT_FALSE(store.Get("a").ok());
  ASSERT_OK(store.Get("a"));
  // Reset clears pending faults.
  store.FailNextReads(5, absl::UnavailableError("x"));
  store.FailNextCommits(5, absl::UnavailableError("x"));
  store.Reset();
  ASSERT_OK(store.Get("a"));
  ASSERT_OK(store.Commit({}, {Mutation::Put("c", "3")}));
}

TEST(FaultInjectingStateStoreTest, AddsDelay) {
  FaultInjectingStateStore store(std::make_unique<MemoryStateStore>());
  store.SetDelay(absl::Milliseconds(50));
  absl::Time start = absl::Now();
  ASSERT_OK(store.Commit({}, {Mutation::Put("a", "1")}));
  ASSERT_OK(store.Get("a"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  store.SetDelay(absl::ZeroDuration());
  start = absl::Now();
  ASSERT_OK(store.Get("a"));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(50));
}

// --- etcd only ----------------------------------------------------------

// Puts a raw etcd key (outside any store prefix); returns its create
// revision.
int64_t PutRaw(EtcdClient& client, const std::string& key,
               const std::string& value) {
  absl::StatusOr<nlohmann::json> r = client.Call(
      "/v3/kv/put",
      {{"key", EtcdClient::Encode(key)}, {"value", EtcdClient::Encode(value)}});
  EXPECT_TRUE(r.ok()) << r.status();
  absl::StatusOr<nlohmann::json> g =
      client.Call("/v3/kv/range", {{"key", EtcdClient::Encode(key)}});
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok() || !g->contains("kvs")) return -1;
  return EtcdClient::Int((*g)["kvs"][0], "create_revision");
}

TEST(EtcdStateStoreTest, CompactedHistoryIsOutOfRange) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdBackedStore> store,
                       MakeEtcdStore(dir, "compact"));
  for (int i = 1; i <= 10; ++i) {
    ASSERT_OK(store->Commit({}, {Mutation::Put(absl::StrCat("k", i), "v")}));
  }
  // Compact etcd's history up to store revision 6 (etcd's 7).
  ASSERT_OK(store->store().client().Call(
      "/v3/kv/compaction", {{"revision", 7}, {"physical", true}}));
  EXPECT_EQ(store->ChangesSince("", 3, 0).status().code(),
            absl::StatusCode::kOutOfRange);
  ASSERT_OK_AND_ASSIGN(std::vector<Change> kept, store->ChangesSince("", 6, 0));
  EXPECT_THAT(Strs(kept), ElementsAre("put k7=v@7", "put k8=v@8", "put k9=v@9",
                                      "put k10=v@10"));
  // Listing still has everything.
  ASSERT_OK_AND_ASSIGN(std::vector<KeyValue> all, store->List("", 0));
  EXPECT_EQ(all.size(), 10u);
}

TEST(EtcdStateStoreTest, PrefixesKeepStoresApart) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdBackedStore> a,
                       MakeEtcdStore(dir, "shared"));
  EtcdStateStoreOptions options;
  options.client.endpoints = a->etcd().endpoints();
  options.key_prefix = "/other";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdStateStore> b,
                       EtcdStateStore::Connect(options));
  ASSERT_OK(a->Commit({}, {Mutation::Put("/jobs/1", "a")}));
  ASSERT_OK(b->Commit({}, {Mutation::Put("/jobs/1", "b")}));
  ASSERT_OK_AND_ASSIGN(std::vector<KeyValue> in_a, a->List("", 0));
  ASSERT_OK_AND_ASSIGN(std::vector<KeyValue> in_b, b->List("", 0));
  EXPECT_THAT(Strs(in_a), ElementsAre("/jobs/1=a@1"));
  EXPECT_THAT(Strs(in_b), ElementsAre("/jobs/1=b@2"));
  // b's write shows in the shared revision but not in a's changes.
  ASSERT_OK_AND_ASSIGN(std::vector<Change> changes, a->ChangesSince("", 0, 0));
  EXPECT_THAT(Strs(changes), ElementsAre("put /jobs/1=a@1"));
  EXPECT_EQ(*a->Revision(), 2);
}

TEST(EtcdStateStoreTest, FenceStopsADeposedLeader) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdBackedStore> store,
                       MakeEtcdStore(dir, "fence"));
  EtcdClient& client = store->store().client();
  const int64_t term = PutRaw(client, "/test/leader", "server-a");
  ASSERT_GT(term, 0);
  int fenced_calls = 0;
  std::string fenced_message;
  store->store().SetFence("/test/leader", term, [&](const absl::Status& st) {
    ++fenced_calls;
    fenced_message = std::string(st.message());
  });
  ASSERT_OK(store->Commit({}, {Mutation::Put("/jobs/1", "x")}));
  // Another server takes over: the key is deleted and created again.
  ASSERT_OK(client.Call("/v3/kv/deleterange",
                        {{"key", EtcdClient::Encode("/test/leader")}}));
  ASSERT_GT(PutRaw(client, "/test/leader", "server-b"), term);
  absl::StatusOr<int64_t> late =
      store->Commit({}, {Mutation::Put("/jobs/2", "y")});
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.status().message(), HasSubstr("fenced"));
  EXPECT_EQ(store->Get("/jobs/2").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(store->Commit({}, {Mutation::Put("/jobs/3", "z")}).ok());
  EXPECT_EQ(fenced_calls, 1);
  EXPECT_THAT(fenced_message, HasSubstr("no longer the leader"));
  // Conditions are still judged (and reported) after the fence.
  store->store().SetFence("/test/leader", *store->store().Revision() + 1,
                          nullptr);
  absl::StatusOr<int64_t> cas =
      store->Commit({{"/jobs/1", 99}}, {Mutation::Put("/jobs/1", "w")});
  EXPECT_EQ(cas.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(cas.status().message(), HasSubstr("/jobs/1"));
}

TEST(EtcdStateStoreTest, KeepsServingWhenOneOfThreeMembersDies) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdBackedStore> store,
                       MakeEtcdStore(dir, "three", 3));
  ASSERT_OK(store->Commit({}, {Mutation::Put("/jobs/1", "before")}));
  // The member the client talks to goes away.
  store->etcd().Kill(0);
  // Until the survivors have a leader (if the dead one led), writes may be
  // refused as unavailable; they succeed within a few seconds.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  absl::StatusOr<int64_t> r;
  do {
    r = store->Commit({}, {Mutation::Put("/jobs/2", "after")});
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable)
          << r.status();
      absl::SleepFor(absl::Milliseconds(100));
    }
  } while (!r.ok() && absl::Now() < deadline);
  ASSERT_OK(r);
  EXPECT_NE(store->store().client().CurrentEndpoint(),
            store->etcd().endpoints()[0]);
  ASSERT_OK_AND_ASSIGN(std::vector<KeyValue> all, store->List("/jobs/", 0));
  EXPECT_THAT(Strs(all), ElementsAre(absl::StrCat("/jobs/1=before@1"),
                                     absl::StrCat("/jobs/2=after@", *r)));
}

TEST(EtcdStateStoreTest, BadEndpointsFailClearly) {
  EtcdStateStoreOptions options;
  options.client.endpoints = {"ftp://127.0.0.1:1"};
  EXPECT_EQ(EtcdStateStore::Connect(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.client.endpoints = {"http://127.0.0.1:1"};
  absl::StatusOr<std::unique_ptr<EtcdStateStore>> none =
      EtcdStateStore::Connect(options);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(none.status().message(), HasSubstr("127.0.0.1:1"));
  EXPECT_EQ(ParseEtcdEndpoints("http://a:1, http://b:2")->size(), 2u);
  EXPECT_FALSE(ParseEtcdEndpoints("http://a").ok());
  EXPECT_FALSE(ParseEtcdEndpoints("").ok());
}

}  // namespace
}  // namespace loom
