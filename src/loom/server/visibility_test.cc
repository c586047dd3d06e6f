// What a user sees of other users' and other projects' work (issue 39,
// finding 10; loom/server/redact.h): another user's dataset sources are
// hidden in its job's spec and events and in `GET /v1/datasets`; with the
// cluster's `private_data`, a plain user's queue, `show`, sacct and usage
// report hold only its own and its projects' jobs and rows, while admins
// and operators see everything.

#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/sched/test_util.h"
#include "loom/server/controller_test_util.h"
#include "loom/server/http_server.h"
#include "loom/server/redact.h"
#include "loom/server/usage_ledger.h"
#include "loom/store/memory_state_store.h"

namespace loom {
namespace {

// Every source lists as one file.
class OneFileLister : public DatasetLister {
 public:
  absl::StatusOr<std::vector<DatasetEntry>> List(const std::string&,
                                                 const std::string&,
                                                 absl::Duration) override {
    return std::vector<DatasetEntry>{{"x.bin", 100, "md5:01", ""}};
  }
};

constexpr char kAlicesSource[] = "/home/alice/secret-set";

class VisibilityTest : public ::testing::Test {
 protected:
  void Start(PrivateData private_data) {
    cluster_ = testing::MakeCluster({{2, 0}}, 2, 8);
    cluster_.datasets.local_roots = {"/home/alice"};
    cluster_.private_data = private_data;
    ControllerOptions options;
    options.dataset_lister = &lister_;
    auto c = Controller::Create(cluster_, &store_, options, absl::Now());
    ASSERT_TRUE(c.ok()) << c.status();
    controller_ = *std::move(c);
    ASSERT_TRUE(auth_.Load(absl::Now()).ok());
    admin_ = Make({.role = Role::kAdmin, .user = "root", .projects = {"*"}});
    olga_ = Make({.role = Role::kOperator, .user = "olga"});
    alice_ =
        Make({.role = Role::kUser, .user = "alice", .projects = {"search"}});
    carol_ =
        Make({.role = Role::kUser, .user = "carol", .projects = {"search"}});
    bob_ = Make({.role = Role::kUser, .user = "bob", .projects = {"research"}});
    HttpServerOptions o;
    o.port = 0;
    o.auth = &auth_;
    server_ = std::make_unique<HttpServer>(controller_.get(), o);
    auto port = server_->Start();
    ASSERT_TRUE(port.ok()) << port.status();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
    // Job 1: Alice's in search, reading a dataset of hers; job 2: Bob's in
    // research.
    ASSERT_EQ(Call("POST", "/v1/jobs", alice_,
                   absl::StrCat(R"({"name": "a", "project": "search",
                       "command": ["python3", "alice-train.py"],
                       "resources": {"gpus": 1},
                       "data": [{"source": ")",
                                kAlicesSource, R"(", "mount": "/data/s"}]})"))
                  .first,
              201);
    ASSERT_EQ(Call("POST", "/v1/jobs", bob_,
                   R"({"name": "b", "project": "research",
                       "command": ["python3", "bob-train.py"],
                       "resources": {"gpus": 1}})")
                  .first,
              201);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Stop();
  }

  std::string Make(TokenRequest r) {
    auto made = auth_.Create(r, absl::Now());
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? made->second : "";
  }
  std::pair<int, nlohmann::json> Call(const std::string& method,
                                      const std::string& path,
                                      const std::string& token,
                                      const std::string& body = "{}") {
    httplib::Headers h = {{"Authorization", "Bearer " + token}};
    auto r = method == "GET" ? client_->Get(path, h)
                             : client_->Post(path, h, body, "application/json");
    if (!r) return {0, {}};
    return {r->status, nlohmann::json::parse(r->body, nullptr, false)};
  }
  // The ids of a listing's jobs (`GET /v1/jobs`, sacct).
  std::vector<int64_t> Ids(const std::string& path, const std::string& token) {
    auto [status, body] = Call("GET", path, token);
    EXPECT_EQ(status, 200) << path << ": " << body;
    std::vector<int64_t> out;
    for (const nlohmann::json& j : body["jobs"]) {
      out.push_back(j["id"].get<int64_t>());
    }
    return out;
  }
  // The (project, user) keys of a usage report's rows.
  std::set<std::pair<std::string, std::string>> UsageRows(
      const nlohmann::json& report) {
    std::set<std::pair<std::string, std::string>> out;
    for (const nlohmann::json& r : report["rows"]) {
      out.insert({r.value("project", ""), r.value("user", "")});
    }
    return out;
  }
  // Ledger entries (one hour ago) of alice/search 3600, carol/search 1800
  // and bob/research 7200 GPU-seconds.
  void WriteUsage() {
    const absl::Time hour = HourOf(absl::Now() - absl::Hours(1));
    std::vector<Mutation> m;
    for (const auto& [project, user, seconds] :
         std::vector<std::tuple<std::string, std::string, double>>{
             {"search", "alice", 3600},
             {"search", "carol", 1800},
             {"research", "bob", 7200}}) {
      m.push_back(Mutation::Put(UsageKey(project, user, hour),
                                nlohmann::json({{"project", project},
                                                {"user", user},
                                                {"hour", FormatTimestamp(hour)},
                                                {"gpu_seconds", seconds}})
                                    .dump()));
    }
    ASSERT_TRUE(store_.Commit({}, m).ok());
  }

  OneFileLister lister_;
  Cluster cluster_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> controller_;
  TokenRegistry auth_{&store_, /*authoritative=*/true,
                      TokenRegistry::NewSecretKey()};
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
  std::string admin_, olga_, alice_, carol_, bob_;
};

TEST_F(VisibilityTest, AnotherUsersDatasetSourceIsHiddenInSpecAndEvents) {
  Start(PrivateData{});
  // Wait for the listing: Alice's events name her source and its version.
  const std::string version =
      DatasetVersion(kAlicesSource, {{"x.bin", 100, "md5:01", ""}});
  nlohmann::json own;
  for (int i = 0; i < 200; ++i) {
    controller_->WaitForDatasetListings();
    controller_->Tick(absl::Now());
    own = Call("GET", "/v1/jobs/1/events", alice_).second;
    if (own.dump().find(version) != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_NE(own.dump().find(
                absl::StrCat("dataset ", kAlicesSource, ": version ", version)),
            std::string::npos)
      << own;
  // Bob (and an operator, as for commands) sees neither, in the events, the
  // job or its spec; the admin sees both.
  for (const std::string& token : {bob_, olga_}) {
    for (const char* path : {"/v1/jobs/1/events", "/v1/jobs/1"}) {
      auto [status, body] = Call("GET", path, token);
      ASSERT_EQ(status, 200) << body;
      EXPECT_EQ(body.dump().find("secret-set"), std::string::npos) << body;
      EXPECT_EQ(body.dump().find(version), std::string::npos) << body;
    }
    nlohmann::json job = Call("GET", "/v1/jobs/1", token).second;
    EXPECT_EQ(job["spec"]["data"][0]["source"], "(hidden: another user's job)");
    EXPECT_EQ(job["spec"]["data"][0]["mount"], "/data/s");
  }
  nlohmann::json bobs = Call("GET", "/v1/jobs/1/events", bob_).second;
  EXPECT_NE(bobs.dump().find("dataset (hidden): version (hidden)"),
            std::string::npos)
      << bobs;
  EXPECT_NE(Call("GET", "/v1/jobs/1/events", admin_)
                .second.dump()
                .find(kAlicesSource),
            std::string::npos);
  // Without private_data, everyone lists every job (as Slurm by default).
  EXPECT_THAT(Ids("/v1/jobs", bob_), ::testing::ElementsAre(1, 2));
  EXPECT_THAT(Ids("/v1/accounting/jobs", bob_), ::testing::ElementsAre(1, 2));
}

TEST_F(VisibilityTest, PrivateJobsAreListedOnlyToTheirUsersAndProjects) {
  Start(PrivateData{.jobs = true});
  // Bob: his own job only, in the queue and in sacct; Alice's is refused.
  EXPECT_THAT(Ids("/v1/jobs", bob_), ::testing::ElementsAre(2));
  EXPECT_THAT(Ids("/v1/accounting/jobs", bob_), ::testing::ElementsAre(2));
  EXPECT_THAT(Ids("/v1/jobs?user=alice", bob_), ::testing::IsEmpty());
  for (const char* path : {"/v1/jobs/1", "/v1/jobs/1/events"}) {
    auto [status, body] = Call("GET", path, bob_);
    EXPECT_EQ(status, 403) << path << ": " << body;
    EXPECT_EQ(body["error"]["code"], "permission_denied");
    EXPECT_EQ(body.dump().find("alice"), std::string::npos) << body;
  }
  // Carol is in Alice's project: she sees Alice's job (redacted), not
  // Bob's.
  EXPECT_THAT(Ids("/v1/jobs", carol_), ::testing::ElementsAre(1));
  EXPECT_THAT(Ids("/v1/accounting/jobs", carol_), ::testing::ElementsAre(1));
  auto [st, shown] = Call("GET", "/v1/jobs/1", carol_);
  ASSERT_EQ(st, 200) << shown;
  EXPECT_EQ(shown["spec"]["command"], "(hidden: another user's job)");
  EXPECT_EQ(Call("GET", "/v1/jobs/2", carol_).first, 403);
  // A limit counts the jobs the caller may see.
  ASSERT_EQ(Call("POST", "/v1/jobs", bob_,
                 R"({"name": "b2", "project": "research",
                     "command": ["true"], "resources": {"gpus": 1}})")
                .first,
            201);
  EXPECT_THAT(Ids("/v1/jobs?limit=1", carol_), ::testing::ElementsAre(1));
  EXPECT_THAT(Ids("/v1/accounting/jobs?limit=1", carol_),
              ::testing::ElementsAre(1));
  // Admins and operators see every job.
  for (const std::string& token : {admin_, olga_}) {
    EXPECT_THAT(Ids("/v1/jobs", token), ::testing::ElementsAre(1, 2, 3));
    EXPECT_THAT(Ids("/v1/accounting/jobs", token),
                ::testing::ElementsAre(1, 2, 3));
    EXPECT_EQ(Call("GET", "/v1/jobs/1", token).first, 200);
  }
}

TEST_F(VisibilityTest, PrivateUsageShowsOnlyOwnUserAndProjectRows) {
  Start(PrivateData{.usage = true});
  WriteUsage();
  using Rows = std::set<std::pair<std::string, std::string>>;
  // Alice: rows of her user, or of her project (Carol's too).
  nlohmann::json both = Call("GET", "/v1/usage?by=project,user", alice_).second;
  EXPECT_EQ(UsageRows(both), (Rows{{"search", "alice"}, {"search", "carol"}}));
  EXPECT_EQ(both["total_gpu_seconds"], 5400.0) << both;
  EXPECT_EQ(UsageRows(Call("GET", "/v1/usage?by=project", alice_).second),
            (Rows{{"search", ""}}));
  nlohmann::json by_user = Call("GET", "/v1/usage?by=user", alice_).second;
  EXPECT_EQ(UsageRows(by_user), (Rows{{"", "alice"}}));
  EXPECT_EQ(by_user["total_gpu_seconds"], 3600.0);
  // Bob: his own.
  EXPECT_EQ(UsageRows(Call("GET", "/v1/usage?by=project,user", bob_).second),
            (Rows{{"research", "bob"}}));
  // Admins and operators: all, with the cluster's total.
  for (const std::string& token : {admin_, olga_}) {
    nlohmann::json all = Call("GET", "/v1/usage?by=project,user", token).second;
    EXPECT_EQ(
        UsageRows(all),
        (Rows{{"research", "bob"}, {"search", "alice"}, {"search", "carol"}}));
    EXPECT_EQ(all["total_gpu_seconds"], 12600.0);
  }
  // Private usage alone leaves the job lists whole.
  EXPECT_THAT(Ids("/v1/jobs", bob_), ::testing::ElementsAre(1, 2));
}

TEST_F(VisibilityTest, WithoutPrivateUsageEveryoneSeesEveryRow) {
  Start(PrivateData{.jobs = true});
  WriteUsage();
  EXPECT_EQ(
      UsageRows(Call("GET", "/v1/usage?by=project,user", bob_).second).size(),
      3u);
}

// `GET /v1/datasets`: a source that only another user's jobs use is hidden
// (with its version and holders), a named dataset never is. The route does
// what this does: `RedactDatasetsFor(p, DatasetSourcesOf(p.user), list)`.
TEST(DatasetsVisibility, SourcesOnlyOtherUsersJobsUseAreHidden) {
  OneFileLister lister;
  MemoryStateStore store;
  ControllerOptions options;
  options.dataset_lister = &lister;
  auto made = Controller::Create(testing::MakeCluster({{2, 0}}, 2, 8), &store,
                                 options, testing::T(0));
  ASSERT_TRUE(made.ok()) << made.status();
  Controller& c = **made;
  for (int n = 0; n < 2; ++n) {
    ASSERT_TRUE(c.Register(testing::EmulatedNode(
                               absl::StrCat("h200-", n),
                               absl::StrCat("127.0.0.", n + 2, ":7100")),
                           testing::T(1))
                    .ok());
  }
  ASSERT_TRUE(c.AddDataset({{"name", "wiki"}, {"source", "cold:wiki"}}, "root",
                           testing::T(1))
                  .ok());
  const std::vector<std::pair<std::string, std::string>> jobs = {
      {"alice", "data: [{source: 'cold:alice/private', mount: /data/d}]\n"},
      {"bob", "data: [{source: 'cold:bob/set', mount: /data/d}]\n"},
      {"bob", "data: [{dataset: wiki}]\n"}};
  for (const auto& [user, data] : jobs) {
    ASSERT_TRUE(
        c.Submit(testing::Spec(absl::StrCat(
                     "name: r\ncommand: [cat]\nresources: {gpus: 1}\n", data)),
                 user, testing::T(2))
            .ok());
  }
  c.Tick(testing::T(2));
  c.WaitForDatasetListings();
  c.Tick(testing::T(2.1));
  // The tasks start and report their fills: every source is counted.
  for (const AgentAction& a : c.TakeActions()) {
    if (a.kind != AgentAction::Kind::kLaunch) continue;
    c.ActionDone(a, absl::OkStatus(), testing::T(2.2), /*started=*/true);
    nlohmann::json item = {{"version", a.body["data"][0]["version"]},
                           {"cached_bytes", 0},
                           {"cold_bytes", 100}};
    ASSERT_TRUE(c.Heartbeat({{"name", a.node},
                             {"tasks",
                              {{{"task_id", a.task_id},
                                {"state", "running"},
                                {"data", nlohmann::json::array({item})}}}}},
                            testing::T(3))
                    .ok());
  }
  auto listed = [&](const Principal& p) {
    nlohmann::json list = c.ListDatasets();
    if (!p.admin()) RedactDatasetsFor(p, c.DatasetSourcesOf(p.user), list);
    std::map<std::string, nlohmann::json> by_source;
    for (const nlohmann::json& d : list["datasets"]) {
      by_source[d.value("name", "") + "|" + d["source"].get<std::string>()] = d;
    }
    return by_source;
  };
  const Principal bob{.user = "bob", .role = Role::kUser};
  std::map<std::string, nlohmann::json> seen = listed(bob);
  ASSERT_EQ(seen.size(), 3u) << nlohmann::json(seen).dump(1);
  EXPECT_TRUE(seen.contains("wiki|cold:wiki"));
  EXPECT_TRUE(seen["|cold:bob/set"]["use"].contains("version"));
  ASSERT_TRUE(seen.contains("|(hidden: another user's dataset)"));
  const nlohmann::json& hidden = seen["|(hidden: another user's dataset)"];
  EXPECT_FALSE(hidden["use"].contains("version")) << hidden;
  EXPECT_FALSE(hidden["use"].contains("nodes")) << hidden;
  EXPECT_EQ(hidden["use"]["starts"], 1);
  EXPECT_EQ(nlohmann::json(seen).dump().find("alice/private"),
            std::string::npos);
  // Alice sees hers and not Bob's; an admin sees all.
  std::map<std::string, nlohmann::json> alices =
      listed(Principal{.user = "alice", .role = Role::kUser});
  EXPECT_TRUE(alices.contains("|cold:alice/private"));
  EXPECT_FALSE(alices.contains("|cold:bob/set"));
  std::map<std::string, nlohmann::json> all =
      listed(Principal{.user = "root", .role = Role::kAdmin});
  EXPECT_TRUE(all.contains("|cold:alice/private"));
  EXPECT_TRUE(all.contains("|cold:bob/set"));
}

}  // namespace
}  // namespace loom
