#include "loom/store/accounting_store.h"

#include <sqlite3.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/store/key_value_accounting_store.h"
#include "loom/store/memory_state_store.h"
#include "loom/store/sqlite_accounting_store.h"
#include "loom/store/sqlite_state_store.h"
#include "nlohmann/json.hpp"

// Unity builds compile this file together with the other store tests, so
// every helper name here carries an `Acct` prefix (or `ACCT_` for macros).

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

#define ACCT_CONCAT_INNER(a, b) a##b
#define ACCT_CONCAT(a, b) ACCT_CONCAT_INNER(a, b)
#define ACCT_ASSERT_OK_AND_ASSIGN(lhs, expr)               \
  auto ACCT_CONCAT(acct_status_or_, __LINE__) = (expr);    \
  ASSERT_TRUE(ACCT_CONCAT(acct_status_or_, __LINE__).ok()) \
      << ACCT_CONCAT(acct_status_or_, __LINE__).status();  \
  lhs = std::move(*ACCT_CONCAT(acct_status_or_, __LINE__))
#define ACCT_ASSERT_OK(expr)                        \
  do {                                              \
    const absl::Status acct_status_ = (expr);       \
    ASSERT_TRUE(acct_status_.ok()) << acct_status_; \
  } while (0)

// A fresh temporary directory under gtest's, removed by the destructor.
class AcctTempDir {
 public:
  AcctTempDir() {
    std::string tmpl = ::testing::TempDir() + "loom_acct_test_XXXXXX";
    char* made = mkdtemp(tmpl.data());
    if (made == nullptr) std::abort();
    path_ = made;
  }
  ~AcctTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  AcctTempDir(const AcctTempDir&) = delete;
  AcctTempDir& operator=(const AcctTempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const {
    return absl::StrCat(path_, "/", name);
  }

 private:
  std::string path_;
};

// A query built field by field (designated initializers would leave the
// other fields without an initializer, which -Wextra reports).
class AcctQuery {
 public:
  AcctQuery& Ids(std::vector<int64_t> ids) {
    query_.ids = std::move(ids);
    return *this;
  }
  AcctQuery& User(std::string user) {
    query_.user = std::move(user);
    return *this;
  }
  AcctQuery& Project(std::string project) {
    query_.project = std::move(project);
    return *this;
  }
  AcctQuery& States(std::vector<std::string> states) {
    query_.states = std::move(states);
    return *this;
  }
  AcctQuery& Since(absl::Time since) {
    query_.since = since;
    return *this;
  }
  AcctQuery& Until(absl::Time until) {
    query_.until = until;
    return *this;
  }
  AcctQuery& Limit(int64_t limit) {
    query_.limit = limit;
    return *this;
  }
  operator FinishedJobQuery() const { return query_; }  // NOLINT: implicit

 private:
  FinishedJobQuery query_;
};

// A job with times in whole seconds since the epoch.
FinishedJob AcctTestJob(int64_t id, std::string user, std::string project,
                        std::string state, int64_t submit_s, int64_t end_s) {
  FinishedJob job;
  job.id = id;
  job.user = std::move(user);
  job.project = std::move(project);
  job.state = std::move(state);
  job.submit_time = absl::FromUnixSeconds(submit_s);
  job.end_time = absl::FromUnixSeconds(end_s);
  job.document =
      absl::StrCat(R"({"id":)", id, R"(,"note":"job \")", id, R"(\" \u00e9"})");
  return job;
}

// Five jobs that the filters tell apart:
//   id user  project state      submitted ended
//   1  alice vision  succeeded  100       200
//   2  bob   vision  failed     150       300
//   3  alice nlp     cancelled  250       260
//   4  carol nlp     succeeded  400       500
//   5  alice vision  failed     500       900
// listed out of id order, so that id order has to come from the store.
std::vector<FinishedJob> AcctSampleJobs() {
  return {AcctTestJob(4, "carol", "nlp", "succeeded", 400, 500),
          AcctTestJob(1, "alice", "vision", "succeeded", 100, 200),
          AcctTestJob(5, "alice", "vision", "failed", 500, 900),
          AcctTestJob(3, "alice", "nlp", "cancelled", 250, 260),
          AcctTestJob(2, "bob", "vision", "failed", 150, 300)};
}

std::vector<int64_t> AcctIdsOf(const std::vector<FinishedJob>& jobs) {
  std::vector<int64_t> ids;
  for (const FinishedJob& job : jobs) ids.push_back(job.id);
  return ids;
}

// Every field, for whole-job comparisons.
std::string AcctJobString(const FinishedJob& job) {
  return absl::StrCat(job.id, "|", job.user, "|", job.project, "|", job.state,
                      "|", absl::ToUnixMicros(job.submit_time), "|",
                      absl::ToUnixMicros(job.end_time), "|", job.document);
}

// One factory per implementation for the typed contract suite. `Make` builds
// a fresh, empty store in `dir`; the factory keeps whatever the store needs.
struct AcctSqliteFactory {
  static constexpr const char* kName = "Sqlite";
  absl::StatusOr<std::unique_ptr<AccountingStore>> Make(
      const AcctTempDir& dir) {
    absl::StatusOr<std::unique_ptr<SqliteAccountingStore>> store =
        SqliteAccountingStore::Open(dir.File("accounting.db"));
    if (!store.ok()) return store.status();
    return std::unique_ptr<AccountingStore>(std::move(*store));
  }
};

struct AcctKeyValueFactory {
  static constexpr const char* kName = "KeyValue";
  absl::StatusOr<std::unique_ptr<AccountingStore>> Make(
      const AcctTempDir& dir) {
    return std::make_unique<KeyValueAccountingStore>(&state);
  }
  MemoryStateStore state;
};

struct AcctFactoryNames {
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};

template <typename Factory>
class AccountingStoreContractTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<AccountingStore>> store =
        factory_.Make(dir_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  // The ids `Find` returns (a marker on error, which also fails the test).
  std::vector<int64_t> FindIds(const FinishedJobQuery& query) {
    absl::StatusOr<std::vector<FinishedJob>> found = store_->Find(query);
    EXPECT_TRUE(found.ok()) << found.status();
    return found.ok() ? AcctIdsOf(*found) : std::vector<int64_t>{-999};
  }
  int64_t CountOrMinusOne() {
    absl::StatusOr<int64_t> count = store_->Count();
    EXPECT_TRUE(count.ok()) << count.status();
    return count.ok() ? *count : -1;
  }

  // Members in this order so that the store goes first, then what it uses.
  AcctTempDir dir_;
  Factory factory_;
  std::unique_ptr<AccountingStore> store_;
};

using AcctFactories = ::testing::Types<AcctSqliteFactory, AcctKeyValueFactory>;
TYPED_TEST_SUITE(AccountingStoreContractTest, AcctFactories, AcctFactoryNames);

TYPED_TEST(AccountingStoreContractTest, EmptyStore) {
  EXPECT_EQ(this->CountOrMinusOne(), 0);
  EXPECT_THAT(this->FindIds({}), IsEmpty());
  EXPECT_THAT(this->FindIds(AcctQuery().Ids({1, 2})), IsEmpty());
  ACCT_ASSERT_OK_AND_ASSIGN(std::optional<FinishedJob> job,
                            this->store_->Get(1));
  EXPECT_FALSE(job.has_value());
  ACCT_ASSERT_OK(this->store_->Add({}));
  EXPECT_EQ(this->CountOrMinusOne(), 0);
}

TYPED_TEST(AccountingStoreContractTest, AddThenGet) {
  FinishedJob job = AcctTestJob(7, "alice", "vision", "succeeded", 100, 200);
  job.submit_time += absl::Microseconds(123456);
  job.document =
      "{\"multi\":\"line\\n\",\"quote\":\"'\\\"\",\"x\":\"\xc3\xa9\"}";
  ACCT_ASSERT_OK(this->store_->Add({job}));
  ACCT_ASSERT_OK_AND_ASSIGN(std::optional<FinishedJob> got,
                            this->store_->Get(7));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(AcctJobString(*got), AcctJobString(job));
  EXPECT_EQ(got->submit_time, job.submit_time);
  EXPECT_EQ(got->end_time, job.end_time);

  ACCT_ASSERT_OK_AND_ASSIGN(std::optional<FinishedJob> absent,
                            this->store_->Get(8));
  EXPECT_FALSE(absent.has_value());
  ACCT_ASSERT_OK_AND_ASSIGN(absent, this->store_->Get(0));
  EXPECT_FALSE(absent.has_value());
  EXPECT_EQ(this->CountOrMinusOne(), 1);
}

TYPED_TEST(AccountingStoreContractTest, EmptyStringsRoundTrip) {
  FinishedJob job = AcctTestJob(3, "", "", "", 0, 0);
  job.document = "";
  ACCT_ASSERT_OK(this->store_->Add({job}));
  ACCT_ASSERT_OK_AND_ASSIGN(std::optional<FinishedJob> got,
                            this->store_->Get(3));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(AcctJobString(*got), AcctJobString(job));
}

TYPED_TEST(AccountingStoreContractTest, AddAgainReplaces) {
  ACCT_ASSERT_OK(this->store_->Add(AcctSampleJobs()));
  // Adding the same jobs again (a retry after a crash) changes nothing.
  ACCT_ASSERT_OK(this->store_->Add(AcctSampleJobs()));
  EXPECT_EQ(this->CountOrMinusOne(), 5);
  EXPECT_THAT(this->FindIds({}), ElementsAre(1, 2, 3, 4, 5));

  // A changed job replaces the stored one, and the filters see the change.
  FinishedJob changed = AcctTestJob(3, "dave", "nlp", "failed", 250, 270);
  changed.document = "{\"changed\":true}";
  ACCT_ASSERT_OK(this->store_->Add({changed}));
  EXPECT_EQ(this->CountOrMinusOne(), 5);
  ACCT_ASSERT_OK_AND_ASSIGN(std::optional<FinishedJob> got,
                            this->store_->Get(3));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(AcctJobString(*got), AcctJobString(changed));
  EXPECT_THAT(this->FindIds(AcctQuery().User("alice")), ElementsAre(1, 5));
  EXPECT_THAT(this->FindIds(AcctQuery().User("dave")), ElementsAre(3));
  EXPECT_THAT(this->FindIds(AcctQuery().States({"cancelled"})), IsEmpty());
}

TYPED_TEST(AccountingStoreContractTest, DuplicateIdsInOneAddKeepTheLast) {
  FinishedJob first = AcctTestJob(9, "alice", "vision", "failed", 1, 2);
  FinishedJob second = AcctTestJob(9, "bob", "nlp", "succeeded", 3, 4);
  ACCT_ASSERT_OK(this->store_->Add({first, second}));
  EXPECT_EQ(this->CountOrMinusOne(), 1);
  ACCT_ASSERT_OK_AND_ASSIGN(std::optional<FinishedJob> got,
                            this->store_->Get(9));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(AcctJobString(*got), AcctJobString(second));
}

TYPED_TEST(AccountingStoreContractTest, InvalidIdIsRefusedAndNothingStored) {
  for (int64_t bad : {int64_t{0}, int64_t{-5}}) {
    absl::Status status = this->store_->Add(
        {AcctTestJob(1, "alice", "vision", "succeeded", 1, 2),
         AcctTestJob(bad, "alice", "vision", "succeeded", 1, 2),
         AcctTestJob(2, "alice", "vision", "succeeded", 1, 2)});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat(bad)));
  }
  EXPECT_EQ(this->CountOrMinusOne(), 0);
  EXPECT_THAT(this->FindIds({}), IsEmpty());
}

TYPED_TEST(AccountingStoreContractTest, NegativeLimitIsRefused) {
  ACCT_ASSERT_OK(this->store_->Add(AcctSampleJobs()));
  absl::StatusOr<std::vector<FinishedJob>> found =
      this->store_->Find(AcctQuery().Limit(-1));
  EXPECT_EQ(found.status().code(), absl::StatusCode::kInvalidArgument);
}

TYPED_TEST(AccountingStoreContractTest, FindReturnsWholeJobsInIdOrder) {
  ACCT_ASSERT_OK(this->store_->Add(AcctSampleJobs()));
  ACCT_ASSERT_OK_AND_ASSIGN(std::vector<FinishedJob> all,
                            this->store_->Find({}));
  std::vector<std::string> want;
  for (int64_t id = 1; id <= 5; ++id) {
    for (const FinishedJob& job : AcctSampleJobs()) {
      if (job.id == id) want.push_back(AcctJobString(job));
    }
  }
  std::vector<std::string> got;
  for (const FinishedJob& job : all) got.push_back(AcctJobString(job));
  EXPECT_THAT(got, ElementsAreArray(want));
}

TYPED_TEST(AccountingStoreContractTest, FindByUserAndProject) {
  ACCT_ASSERT_OK(this->store_->Add(AcctSampleJobs()));
  EXPECT_THAT(this->FindIds(AcctQuery().User("alice")), ElementsAre(1, 3, 5));
  EXPECT_THAT(this->FindIds(AcctQuery().User("bob")), ElementsAre(2));
  EXPECT_THAT(this->FindIds(AcctQuery().User("nobody")), IsEmpty());
  EXPECT_THAT(this->FindIds(AcctQuery().User("ALICE")), IsEmpty());  // exact
  EXPECT_THAT(this->FindIds(AcctQuery().Project("nlp")), ElementsAre(3, 4));
  EXPECT_THAT(this->FindIds(AcctQuery().Project("vision")),
              ElementsAre(1, 2, 5));
  EXPECT_THAT(this->FindIds(AcctQuery().User("alice").Project("vision")),
              ElementsAre(1, 5));
}

TYPED_TEST(AccountingStoreContractTest, FindByStates) {
  ACCT_ASSERT_OK(this->store_->Add(AcctSampleJobs()));
  EXPECT_THAT(this->FindIds(AcctQuery().States({"failed", "cancelled"})),
              ElementsAre(2, 3, 5));
  EXPECT_THAT(this->FindIds(AcctQuery().States({"succeeded", "succeeded"})),
              ElementsAre(1, 4));
  EXPECT_THAT(this->FindIds(AcctQuery().States({"running"})), IsEmpty());
}

TYPED_TEST(AccountingStoreContractTest, FindByTimeWindow) {
  ACCT_ASSERT_OK(this->store_->Add(AcctSampleJobs()));
  // `since`: ended at or after it (job 3 ended exactly at 260).
  EXPECT_THAT(this->FindIds(AcctQuery().Since(absl::FromUnixSeconds(260))),
              ElementsAre(2, 3, 4, 5));
  EXPECT_THAT(this->FindIds(AcctQuery().Since(absl::FromUnixSeconds(261))),
              ElementsAre(2, 4, 5));
  // `until`: submitted before it (job 3 was submitted exactly at 250).
  EXPECT_THAT(this->FindIds(AcctQuery().Until(absl::FromUnixSeconds(250))),
              ElementsAre(1, 2));
  EXPECT_THAT(this->FindIds(AcctQuery().Until(absl::FromUnixSeconds(251))),
              ElementsAre(1, 2, 3));
  // Both: existed at some time in [since, until).
  EXPECT_THAT(this->FindIds(AcctQuery()
                                .Since(absl::FromUnixSeconds(260))
                                .Until(absl::FromUnixSeconds(450))),
              ElementsAre(2, 3, 4));
  EXPECT_THAT(this->FindIds(AcctQuery().Since(absl::FromUnixSeconds(1000))),
              IsEmpty());
  EXPECT_THAT(this->FindIds(AcctQuery()
                                .Since(absl::InfinitePast())
                                .Until(absl::InfiniteFuture())),
              ElementsAre(1, 2, 3, 4, 5));
  EXPECT_THAT(this->FindIds(AcctQuery().Since(absl::InfiniteFuture())),
              IsEmpty());
  EXPECT_THAT(this->FindIds(AcctQuery().Until(absl::InfinitePast())),
              IsEmpty());
}

TYPED_TEST(AccountingStoreContractTest, SubMicrosecondBoundsJudgeStoredTimes) {
  // Times are kept to the microsecond; the bounds compare with what is kept.
  FinishedJob job = AcctTestJob(1, "alice", "vision", "succeeded", 0, 0);
  job.submit_time = absl::FromUnixMicros(1000) + absl::Nanoseconds(400);
  job.end_time = absl::FromUnixMicros(2000) + absl::Nanoseconds(700);
  ACCT_ASSERT_OK(this->store_->Add({job}));
  ACCT_ASSERT_OK_AND_ASSIGN(std::optional<FinishedJob> got,
                            this->store_->Get(1));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->submit_time, absl::FromUnixMicros(1000));
  EXPECT_EQ(got->end_time, absl::FromUnixMicros(2000));

  const absl::Time end = absl::FromUnixMicros(2000);
  const absl::Time submit = absl::FromUnixMicros(1000);
  EXPECT_THAT(this->FindIds(AcctQuery().Since(end)), ElementsAre(1));
  EXPECT_THAT(this->FindIds(AcctQuery().Since(end + absl::Nanoseconds(1))),
              IsEmpty());
  EXPECT_THAT(this->FindIds(AcctQuery().Until(submit)), IsEmpty());
  EXPECT_THAT(this->FindIds(AcctQuery().Until(submit + absl::Nanoseconds(1))),
              ElementsAre(1));
  // Before the epoch too (rounding toward the future, not toward zero).
  FinishedJob early = AcctTestJob(2, "alice", "vision", "succeeded", 0, 0);
  early.submit_time = absl::FromUnixMicros(-3000);
  early.end_time = absl::FromUnixMicros(-2000);
  ACCT_ASSERT_OK(this->store_->Add({early}));
  EXPECT_THAT(this->FindIds(AcctQuery().Ids({2}).Since(
                  absl::FromUnixMicros(-2000) + absl::Nanoseconds(1))),
              IsEmpty());
  EXPECT_THAT(this->FindIds(AcctQuery().Ids({2}).Since(
                  absl::FromUnixMicros(-2000) - absl::Nanoseconds(1))),
              ElementsAre(2));
}

TYPED_TEST(AccountingStoreContractTest, FindByIds) {
  ACCT_ASSERT_OK(this->store_->Add(AcctSampleJobs()));
  EXPECT_THAT(this->FindIds(AcctQuery().Ids({5, 2, 2, 42, 0, -1})),
              ElementsAre(2, 5));
  EXPECT_THAT(this->FindIds(AcctQuery().Ids({42})), IsEmpty());
}

TYPED_TEST(AccountingStoreContractTest, FindWithLimitTakesTheLowestIds) {
  ACCT_ASSERT_OK(this->store_->Add(AcctSampleJobs()));
  EXPECT_THAT(this->FindIds(AcctQuery().Limit(2)), ElementsAre(1, 2));
  EXPECT_THAT(this->FindIds(AcctQuery().User("alice").Limit(2)),
              ElementsAre(1, 3));
  EXPECT_THAT(this->FindIds(AcctQuery().Ids({5, 4, 3}).Limit(2)),
              ElementsAre(3, 4));
  EXPECT_THAT(this->FindIds(AcctQuery().Limit(10)), ElementsAre(1, 2, 3, 4, 5));
  EXPECT_THAT(this->FindIds(AcctQuery().Limit(0)), ElementsAre(1, 2, 3, 4, 5));
}

TYPED_TEST(AccountingStoreContractTest, FindCombinesFilters) {
  ACCT_ASSERT_OK(this->store_->Add(AcctSampleJobs()));
  EXPECT_THAT(this->FindIds(AcctQuery()
                                .User("alice")
                                .Project("vision")
                                .States({"failed"})
                                .Since(absl::FromUnixSeconds(300))),
              ElementsAre(5));
  EXPECT_THAT(
      this->FindIds(AcctQuery().Ids({1, 3, 5}).User("alice").Project("nlp")),
      ElementsAre(3));
  EXPECT_THAT(this->FindIds(AcctQuery()
                                .Ids({1, 2, 3, 4, 5})
                                .States({"succeeded", "failed"})
                                .Until(absl::FromUnixSeconds(450))
                                .Limit(2)),
              ElementsAre(1, 2));
  EXPECT_THAT(this->FindIds(AcctQuery().User("bob").Project("nlp")), IsEmpty());
}

TYPED_TEST(AccountingStoreContractTest, FilterValuesAreDataNotSql) {
  ACCT_ASSERT_OK(this->store_->Add(AcctSampleJobs()));
  FinishedJob odd =
      AcctTestJob(6, "x' OR '1'='1", "p\"; DROP TABLE t; --", "failed", 1, 2);
  ACCT_ASSERT_OK(this->store_->Add({odd}));
  EXPECT_THAT(this->FindIds(AcctQuery().User("x' OR '1'='1")), ElementsAre(6));
  EXPECT_THAT(this->FindIds(AcctQuery().User("' OR 1=1 --")), IsEmpty());
  EXPECT_THAT(this->FindIds(AcctQuery().Project("p\"; DROP TABLE t; --")),
              ElementsAre(6));
  EXPECT_THAT(this->FindIds(AcctQuery().States({"failed') OR ('1'='1"})),
              IsEmpty());
  EXPECT_EQ(this->CountOrMinusOne(), 6);
}

TYPED_TEST(AccountingStoreContractTest, ManyJobsAndManyIds) {
  std::vector<FinishedJob> jobs;
  for (int64_t id = 1; id <= 1200; ++id) {
    jobs.push_back(AcctTestJob(id, id % 3 == 0 ? "alice" : "bob", "vision",
                               "succeeded", id, id + 10));
  }
  ACCT_ASSERT_OK(this->store_->Add(jobs));
  EXPECT_EQ(this->CountOrMinusOne(), 1200);

  // 600 ids (more than one SQL query binds, more than the key-value store
  // reads one by one), given out of order.
  FinishedJobQuery query;
  std::vector<int64_t> odd;
  for (int64_t id = 1199; id >= 1; id -= 2) query.ids.push_back(id);
  for (int64_t id = 1; id <= 1199; id += 2) odd.push_back(id);
  EXPECT_THAT(this->FindIds(query), ElementsAreArray(odd));

  query.limit = 550;
  EXPECT_THAT(this->FindIds(query),
              ElementsAreArray(odd.begin(), odd.begin() + 550));

  query.limit = 0;
  query.user = "alice";  // odd multiples of 3
  std::vector<int64_t> want;
  for (int64_t id : odd) {
    if (id % 3 == 0) want.push_back(id);
  }
  EXPECT_THAT(this->FindIds(query), ElementsAreArray(want));

  query.limit = 150;  // the limit falls inside a later part
  query.user.clear();
  query.ids.clear();
  for (int64_t id = 1; id <= 1200; ++id) query.ids.push_back(id);
  query.since = absl::FromUnixSeconds(1000);  // ended at id + 10 >= 1000
  std::vector<int64_t> late;
  for (int64_t id = 990; id < 990 + 150; ++id) late.push_back(id);
  EXPECT_THAT(this->FindIds(query), ElementsAreArray(late));
}

TYPED_TEST(AccountingStoreContractTest, ConcurrentAddsLoseNothing) {
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this, t, &results] {
      for (int batch = 0; batch < 5; ++batch) {
        std::vector<FinishedJob> jobs;
        for (int i = 0; i < 10; ++i) {
          const int64_t id = 1 + t * 50 + batch * 10 + i;
          jobs.push_back(
              AcctTestJob(id, "alice", "vision", "succeeded", id, id + 1));
        }
        absl::Status s = this->store_->Add(jobs);
        if (!s.ok()) results[t] = s;
        (void)this->store_->Find(AcctQuery().User("alice").Limit(5));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(this->CountOrMinusOne(), 200);
}

// --- FinishedJobMatches ----------------------------------------------------

TEST(FinishedJobMatchesTest, EachFilterAndTheWindow) {
  const FinishedJob job = AcctTestJob(3, "alice", "nlp", "failed", 100, 200);
  EXPECT_TRUE(FinishedJobMatches({}, job));
  EXPECT_TRUE(FinishedJobMatches(AcctQuery().Ids({1, 3}), job));
  EXPECT_FALSE(FinishedJobMatches(AcctQuery().Ids({1, 2}), job));
  EXPECT_TRUE(FinishedJobMatches(AcctQuery().User("alice"), job));
  EXPECT_FALSE(FinishedJobMatches(AcctQuery().User("bob"), job));
  EXPECT_TRUE(FinishedJobMatches(AcctQuery().Project("nlp"), job));
  EXPECT_FALSE(FinishedJobMatches(AcctQuery().Project("vision"), job));
  EXPECT_TRUE(
      FinishedJobMatches(AcctQuery().States({"succeeded", "failed"}), job));
  EXPECT_FALSE(FinishedJobMatches(AcctQuery().States({"cancelled"}), job));
  EXPECT_TRUE(
      FinishedJobMatches(AcctQuery().Since(absl::FromUnixSeconds(200)), job));
  EXPECT_FALSE(
      FinishedJobMatches(AcctQuery().Since(absl::FromUnixSeconds(201)), job));
  EXPECT_TRUE(
      FinishedJobMatches(AcctQuery().Until(absl::FromUnixSeconds(101)), job));
  EXPECT_FALSE(
      FinishedJobMatches(AcctQuery().Until(absl::FromUnixSeconds(100)), job));
  // The limit is not a filter.
  EXPECT_TRUE(FinishedJobMatches(AcctQuery().Limit(1), job));
}

// --- SqliteAccountingStore -------------------------------------------------

TEST(SqliteAccountingStoreTest, DataSurvivesReopen) {
  AcctTempDir dir;
  const std::string path = dir.File("accounting.db");
  {
    ACCT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqliteAccountingStore> store,
                              SqliteAccountingStore::Open(path));
    ACCT_ASSERT_OK(store->Add(AcctSampleJobs()));
  }
  ACCT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqliteAccountingStore> store,
                            SqliteAccountingStore::Open(path));
  EXPECT_EQ(store->path(), path);
  ACCT_ASSERT_OK_AND_ASSIGN(int64_t count, store->Count());
  EXPECT_EQ(count, 5);
  ACCT_ASSERT_OK_AND_ASSIGN(std::vector<FinishedJob> alice,
                            store->Find(AcctQuery().User("alice")));
  EXPECT_THAT(AcctIdsOf(alice), ElementsAre(1, 3, 5));
  ACCT_ASSERT_OK_AND_ASSIGN(std::optional<FinishedJob> four, store->Get(4));
  ASSERT_TRUE(four.has_value());
  EXPECT_EQ(AcctJobString(*four), AcctJobString(AcctSampleJobs()[0]));
}

TEST(SqliteAccountingStoreTest, FileIsMarkedInWalModeWithIndexes) {
  AcctTempDir dir;
  const std::string path = dir.File("accounting.db");
  {
    ACCT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqliteAccountingStore> store,
                              SqliteAccountingStore::Open(path));
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  auto query = [db](const char* sql) {
    std::vector<std::string> rows;
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) != SQLITE_OK) {
      return std::vector<std::string>{"<error>"};
    }
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      rows.push_back(text != nullptr ? reinterpret_cast<const char*>(text)
                                     : "");
    }
    sqlite3_finalize(stmt);
    return rows;
  };
  EXPECT_THAT(query("PRAGMA journal_mode"), ElementsAre("wal"));
  EXPECT_THAT(query("PRAGMA application_id"),
              ElementsAre(absl::StrCat(0x6c616363)));
  EXPECT_THAT(query("PRAGMA user_version"), ElementsAre("1"));
  EXPECT_THAT(query("SELECT name FROM sqlite_master WHERE type = 'index' "
                    "ORDER BY name"),
              ElementsAre("finished_jobs_end", "finished_jobs_project_end",
                          "finished_jobs_user_end"));
  sqlite3_close(db);
}

TEST(SqliteAccountingStoreTest, GarbageFileIsRefusedNamingThePath) {
  AcctTempDir dir;
  const std::string path = dir.File("garbage.db");
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 4096; ++i) out << "not an accounting database " << i;
  }
  absl::StatusOr<std::unique_ptr<SqliteAccountingStore>> store =
      SqliteAccountingStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss)
      << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr(path));
}

TEST(SqliteAccountingStoreTest, StateStoreFileIsRefused) {
  AcctTempDir dir;
  const std::string path = dir.File("state.db");
  {
    ACCT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqliteStateStore> state,
                              SqliteStateStore::Open(path));
  }
  absl::StatusOr<std::unique_ptr<SqliteAccountingStore>> store =
      SqliteAccountingStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition)
      << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr(path));
  EXPECT_THAT(store.status().message(), HasSubstr("state store"));
}

TEST(SqliteAccountingStoreTest, StateStoreRefusesAnAccountingFile) {
  AcctTempDir dir;
  const std::string path = dir.File("accounting.db");
  {
    ACCT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqliteAccountingStore> store,
                              SqliteAccountingStore::Open(path));
  }
  absl::StatusOr<std::unique_ptr<SqliteStateStore>> state =
      SqliteStateStore::Open(path);
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().code(), absl::StatusCode::kFailedPrecondition)
      << state.status();
}

TEST(SqliteAccountingStoreTest, ForeignDatabaseIsRefused) {
  AcctTempDir dir;
  const std::string marked = dir.File("marked.db");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(marked.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "PRAGMA application_id = 42;"
                         "CREATE TABLE t (x INTEGER);",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  absl::StatusOr<std::unique_ptr<SqliteAccountingStore>> store =
      SqliteAccountingStore::Open(marked);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(marked));
  EXPECT_THAT(store.status().message(), HasSubstr("not a loom accounting"));

  // Without an application id, foreign tables give it away.
  const std::string unmarked = dir.File("unmarked.db");
  ASSERT_EQ(sqlite3_open(unmarked.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t (x INTEGER);", nullptr, nullptr,
                         nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  store = SqliteAccountingStore::Open(unmarked);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(unmarked));
}

TEST(SqliteAccountingStoreTest, NewerSchemaIsRefused) {
  AcctTempDir dir;
  const std::string path = dir.File("accounting.db");
  {
    ACCT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqliteAccountingStore> store,
                              SqliteAccountingStore::Open(path));
    ACCT_ASSERT_OK(store->Add(AcctSampleJobs()));
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(db, "PRAGMA user_version = 2;", nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(db);
  absl::StatusOr<std::unique_ptr<SqliteAccountingStore>> store =
      SqliteAccountingStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(path));
  EXPECT_THAT(store.status().message(), HasSubstr("schema version 2"));
}

TEST(SqliteAccountingStoreTest, BadPathsFailCleanly) {
  AcctTempDir dir;
  const std::string missing = dir.File("no/such/dir/accounting.db");
  absl::StatusOr<std::unique_ptr<SqliteAccountingStore>> store =
      SqliteAccountingStore::Open(missing);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr(missing));

  store = SqliteAccountingStore::Open(dir.path());  // a directory
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr(dir.path()));

  EXPECT_EQ(SqliteAccountingStore::Open("").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- KeyValueAccountingStore -----------------------------------------------

// A `StateStore` over a `MemoryStateStore` that records how many mutations
// and bytes each commit carried, and can fail one chosen commit.
class AcctCountingStateStore final : public StateStore {
 public:
  struct CommitRecord {
    size_t mutations = 0;
    size_t bytes = 0;  // keys plus values
  };

  // Commit number `n` (from 1) fails with `Unavailable`, changing nothing
  // (0: none fails).
  void FailCommit(int n) {
    absl::MutexLock lock(&mu_);
    fail_at_ = n;
  }
  std::vector<CommitRecord> commits() {
    absl::MutexLock lock(&mu_);
    return commits_;
  }
  MemoryStateStore& target() { return target_; }

  absl::StatusOr<KeyValue> Get(std::string_view key) override {
    return target_.Get(key);
  }
  absl::StatusOr<std::vector<KeyValue>> List(std::string_view prefix,
                                             int64_t limit = 0) override {
    return target_.List(prefix, limit);
  }
  absl::StatusOr<int64_t> Commit(
      const std::vector<Condition>& conditions,
      const std::vector<Mutation>& mutations) override {
    {
      absl::MutexLock lock(&mu_);
      CommitRecord record{mutations.size(), 0};
      for (const Mutation& m : mutations) {
        record.bytes += m.key.size() + m.value.size();
      }
      commits_.push_back(record);
      if (static_cast<int>(commits_.size()) == fail_at_) {
        return absl::UnavailableError("injected commit failure");
      }
    }
    return target_.Commit(conditions, mutations);
  }
  absl::StatusOr<int64_t> Revision() override { return target_.Revision(); }
  absl::StatusOr<std::vector<Change>> ChangesSince(std::string_view prefix,
                                                   int64_t revision,
                                                   int64_t limit) override {
    return target_.ChangesSince(prefix, revision, limit);
  }

 private:
  MemoryStateStore target_;
  absl::Mutex mu_;
  std::vector<CommitRecord> commits_ ABSL_GUARDED_BY(mu_);
  int fail_at_ ABSL_GUARDED_BY(mu_) = 0;
};

std::vector<FinishedJob> AcctNumberedJobs(int64_t first, int64_t n) {
  std::vector<FinishedJob> jobs;
  for (int64_t id = first; id < first + n; ++id) {
    jobs.push_back(AcctTestJob(id, "alice", "vision", "succeeded", id, id + 1));
  }
  return jobs;
}

TEST(KeyValueAccountingStoreTest, AddCommitsInBatchesOfAtMost100) {
  AcctCountingStateStore state;
  KeyValueAccountingStore store(&state);
  ACCT_ASSERT_OK_AND_ASSIGN(int64_t before, state.Revision());
  ACCT_ASSERT_OK(store.Add(AcctNumberedJobs(1, 250)));
  std::vector<size_t> sizes;
  for (const auto& record : state.commits()) sizes.push_back(record.mutations);
  EXPECT_THAT(sizes, ElementsAre(100, 100, 50));
  ACCT_ASSERT_OK_AND_ASSIGN(int64_t after, state.Revision());
  EXPECT_EQ(after, before + 3);
  ACCT_ASSERT_OK_AND_ASSIGN(int64_t count, store.Count());
  EXPECT_EQ(count, 250);
}

TEST(KeyValueAccountingStoreTest, LargeDocumentsSplitCommitsByBytes) {
  AcctCountingStateStore state;
  KeyValueAccountingStore store(&state);
  std::vector<FinishedJob> jobs = AcctNumberedJobs(1, 12);
  for (FinishedJob& job : jobs) job.document = std::string(100 * 1024, 'x');
  ACCT_ASSERT_OK(store.Add(jobs));
  const std::vector<AcctCountingStateStore::CommitRecord> commits =
      state.commits();
  EXPECT_GE(commits.size(), 3u);
  for (const auto& record : commits) {
    EXPECT_LE(record.bytes, 512u * 1024u);
    EXPECT_GE(record.mutations, 1u);
  }
  ACCT_ASSERT_OK_AND_ASSIGN(int64_t count, store.Count());
  EXPECT_EQ(count, 12);
}

TEST(KeyValueAccountingStoreTest, FailedAddKeepsEarlierBatchesAndRetryEnds) {
  AcctCountingStateStore state;
  KeyValueAccountingStore store(&state);
  state.FailCommit(2);
  absl::Status status = store.Add(AcctNumberedJobs(1, 250));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("101 to 200"));
  ACCT_ASSERT_OK_AND_ASSIGN(int64_t count, store.Count());
  EXPECT_EQ(count, 100);  // the first batch only
  // Adding them all again completes the history.
  ACCT_ASSERT_OK(store.Add(AcctNumberedJobs(1, 250)));
  ACCT_ASSERT_OK_AND_ASSIGN(count, store.Count());
  EXPECT_EQ(count, 250);
}

TEST(KeyValueAccountingStoreTest, KeysAreZeroPaddedIdsWithCompactJson) {
  MemoryStateStore state;
  KeyValueAccountingStore store(&state);
  EXPECT_EQ(store.prefix(), "/accounting/jobs/");
  EXPECT_EQ(store.KeyOf(42), "/accounting/jobs/00000000000000000042");
  FinishedJob job = AcctTestJob(42, "alice", "vision", "failed", 100, 200);
  ACCT_ASSERT_OK(
      store.Add({job, AcctTestJob(7, "bob", "nlp", "succeeded", 1, 2),
                 AcctTestJob(1000000007, "bob", "nlp", "succeeded", 1, 2)}));
  ACCT_ASSERT_OK_AND_ASSIGN(std::vector<KeyValue> kvs,
                            state.List("/accounting/jobs/"));
  ASSERT_EQ(kvs.size(), 3u);
  EXPECT_EQ(kvs[0].key, "/accounting/jobs/00000000000000000007");
  EXPECT_EQ(kvs[1].key, "/accounting/jobs/00000000000000000042");
  EXPECT_EQ(kvs[2].key, "/accounting/jobs/00000000001000000007");

  const nlohmann::json value =
      nlohmann::json::parse(kvs[1].value, nullptr, false);
  ASSERT_TRUE(value.is_object()) << kvs[1].value;
  EXPECT_EQ(value.dump(), kvs[1].value);  // compact
  EXPECT_EQ(value.size(), 7u);
  EXPECT_EQ(value.value("id", int64_t{0}), 42);
  EXPECT_EQ(value.value("user", ""), "alice");
  EXPECT_EQ(value.value("project", ""), "vision");
  EXPECT_EQ(value.value("state", ""), "failed");
  EXPECT_EQ(value.value("submit_us", int64_t{0}), 100'000'000);
  EXPECT_EQ(value.value("end_us", int64_t{0}), 200'000'000);
  EXPECT_EQ(value.value("document", ""), job.document);
}

TEST(KeyValueAccountingStoreTest, UndecodableValuesAreSkipped) {
  MemoryStateStore state;
  KeyValueAccountingStore store(&state);
  ACCT_ASSERT_OK(
      store.Add({AcctTestJob(1, "alice", "vision", "succeeded", 1, 2)}));
  const std::string good =
      R"({"id":9,"user":"alice","project":"vision","state":"failed",)"
      R"("submit_us":1,"end_us":2,"document":"{}"})";
  ACCT_ASSERT_OK_AND_ASSIGN(
      int64_t revision,
      state.Commit({}, {Mutation::Put(store.KeyOf(3), "not json at all {"),
                        Mutation::Put(store.KeyOf(4), R"({"id":"4"})"),
                        Mutation::Put(store.KeyOf(5), "[1,2,3]"),
                        Mutation::Put(store.KeyOf(6), good),  // id 9, not 6
                        Mutation::Put(store.KeyOf(7),
                                      R"({"id":7,"user":1,"project":"p",)"
                                      R"("state":"s","submit_us":1,)"
                                      R"("end_us":2,"document":""})"),
                        Mutation::Put(store.KeyOf(8), ""),
                        Mutation::Put("/accounting/jobs/garbage", good),
                        Mutation::Put("/accounting/jobs/9", good)}));
  (void)revision;
  ACCT_ASSERT_OK_AND_ASSIGN(std::vector<FinishedJob> all, store.Find({}));
  EXPECT_THAT(AcctIdsOf(all), ElementsAre(1));
  ACCT_ASSERT_OK_AND_ASSIGN(all, store.Find(AcctQuery().User("alice")));
  EXPECT_THAT(AcctIdsOf(all), ElementsAre(1));
  ACCT_ASSERT_OK_AND_ASSIGN(all,
                            store.Find(AcctQuery().Ids({3, 4, 5, 6, 7, 8, 9})));
  EXPECT_THAT(AcctIdsOf(all), IsEmpty());
  for (int64_t id = 3; id <= 9; ++id) {
    ACCT_ASSERT_OK_AND_ASSIGN(std::optional<FinishedJob> got, store.Get(id));
    EXPECT_FALSE(got.has_value()) << id;
  }
  ACCT_ASSERT_OK_AND_ASSIGN(int64_t count, store.Count());
  EXPECT_EQ(count, 1);
  // Adding a job again repairs its key.
  ACCT_ASSERT_OK(
      store.Add({AcctTestJob(3, "carol", "nlp", "cancelled", 1, 2)}));
  ACCT_ASSERT_OK_AND_ASSIGN(all, store.Find({}));
  EXPECT_THAT(AcctIdsOf(all), ElementsAre(1, 3));
}

TEST(KeyValueAccountingStoreTest, PrefixesKeepStoresApart) {
  MemoryStateStore state;
  KeyValueAccountingStore a(&state);
  KeyValueAccountingStore b(&state, "/other/accounting/");
  ACCT_ASSERT_OK(a.Add({AcctTestJob(1, "alice", "vision", "succeeded", 1, 2)}));
  ACCT_ASSERT_OK(b.Add({AcctTestJob(2, "bob", "nlp", "succeeded", 1, 2)}));
  // Neighbouring keys that are not under the prefix.
  ACCT_ASSERT_OK(
      state
          .Commit({},
                  {Mutation::Put("/accounting/jobs", "x"),
                   Mutation::Put("/accounting/jobsX/00000000000000000003", "x"),
                   Mutation::Put("/loom/jobs/1", "{}")})
          .status());
  ACCT_ASSERT_OK_AND_ASSIGN(std::vector<FinishedJob> in_a, a.Find({}));
  EXPECT_THAT(AcctIdsOf(in_a), ElementsAre(1));
  ACCT_ASSERT_OK_AND_ASSIGN(std::vector<FinishedJob> in_b, b.Find({}));
  EXPECT_THAT(AcctIdsOf(in_b), ElementsAre(2));
  ACCT_ASSERT_OK_AND_ASSIGN(std::optional<FinishedJob> two, a.Get(2));
  EXPECT_FALSE(two.has_value());
  ACCT_ASSERT_OK_AND_ASSIGN(int64_t count, a.Count());
  EXPECT_EQ(count, 1);
}

#undef ACCT_ASSERT_OK
#undef ACCT_ASSERT_OK_AND_ASSIGN
#undef ACCT_CONCAT
#undef ACCT_CONCAT_INNER

}  // namespace
}  // namespace loom
