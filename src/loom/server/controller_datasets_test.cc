// Datasets on the server (controller_datasets.cc, docs/datasets.md): a job
// with `data` is listed before it is queued; every task of the run gets the
// same versions and its peers in its launch; a store that cannot be listed
// keeps the job pending with that reason (the nodes stay up) and is asked
// again; a changed source gives the next run a new version.
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/sched/test_util.h"
#include "loom/server/controller.h"
#include "loom/server/controller_test_util.h"
#include "loom/server/dataset_lister.h"
#include "loom/store/memory_state_store.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using testing::EmulatedNode;
using testing::MakeCluster;
using testing::Spec;
using testing::T;

// Answers from a map of source -> files; a source mapped to nothing is a
// store that is down.
class FakeDatasetLister : public DatasetLister {
 public:
  absl::StatusOr<std::vector<DatasetEntry>> List(
      const std::string& source, const std::string& user,
      absl::Duration timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return open_; });
    ++calls_;
    users_.push_back(user);
    if (auto d = denied_.find(source); d != denied_.end()) {
      return absl::PermissionDeniedError(d->second);
    }
    auto it = files_.find(source);
    if (it == files_.end()) {
      return absl::UnavailableError("connection refused");
    }
    return it->second;
  }
  void Set(const std::string& source, std::vector<DatasetEntry> files) {
    std::lock_guard<std::mutex> lock(mu_);
    files_[source] = std::move(files);
  }
  // While closed, listings wait (as a slow store would).
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void Deny(const std::string& source, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    denied_[source] = why;
  }
  void Down(const std::string& source) {
    std::lock_guard<std::mutex> lock(mu_);
    files_.erase(source);
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  std::vector<std::string> users() {
    std::lock_guard<std::mutex> lock(mu_);
    return users_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  std::map<std::string, std::vector<DatasetEntry>> files_;
  int calls_ = 0;
  std::vector<std::string> users_;  // of each call, in order
  std::map<std::string, std::string> denied_;  // source -> why
};

class DatasetsTest : public ::testing::Test {
 protected:
  DatasetsTest() { Start(MakeCluster({{2, 0}}, 4, 8), 2); }
  // A controller on `cluster` (fresh store) with nodes h200-0.. registered;
  // node n's agent at 127.0.0.(n+2):7100, holding `held[n]` versions.
  void Start(Cluster cluster, int nodes,
             std::map<int, std::vector<std::string>> held = {}) {
    c_.reset();
    cluster_ = std::move(cluster);
    store_ = std::make_unique<MemoryStateStore>();
    ControllerOptions options;
    options.dataset_lister = &lister_;
    auto c = Controller::Create(cluster_, store_.get(), options, T(0));
    EXPECT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
    for (int n = 0; n < nodes; ++n) {
      nlohmann::json body =
          EmulatedNode("h200-" + std::to_string(n),
                       "127.0.0." + std::to_string(n + 2) + ":7100",
                       nlohmann::json::array());
      if (held.contains(n)) body["datasets"] = held[n];
      auto r = c_->Register(body, T(1));
      EXPECT_TRUE(r.ok()) << r.status();
    }
  }
  std::vector<AgentAction> Launches() {
    std::vector<AgentAction> out;
    for (AgentAction& a : c_->TakeActions()) {
      if (a.kind == AgentAction::Kind::kLaunch) out.push_back(std::move(a));
    }
    return out;
  }
  // Lets the listings answer and applies them.
  void Settle(double t) {
    c_->WaitForDatasetListings();
    c_->Tick(T(t));
  }
  nlohmann::json Job(JobId id, double t) { return *c_->GetJob(id, T(t)); }

  static constexpr char kSpec[] =
      "name: read\ncommand: [cat]\ntasks: 2\n"
      "resources: {gpus_per_task: 8}\n"
      "data: [{source: 'cold:sets/a', mount: /data/a}]\n";

  FakeDatasetLister lister_;
  Cluster cluster_;
  std::unique_ptr<MemoryStateStore> store_;
  std::unique_ptr<Controller> c_;
};

TEST_F(DatasetsTest, EveryTaskGetsTheSameVersionAndItsPeers) {
  lister_.Set("cold:sets/a", {{"x.bin", 100, "", "2026-01-01T00:00:00Z"},
                              {"y.bin", 20, "md5:ab", ""}});
  lister_.Close();
  ASSERT_TRUE(c_->Submit(Spec(kSpec), "alice", T(1)).ok());
  c_->Tick(T(1));
  EXPECT_TRUE(Launches().empty());  // not queued before it is listed
  EXPECT_EQ(Job(1, 1)["reason"], "listing its datasets");
  lister_.Open();
  Settle(1.1);
  std::vector<AgentAction> launches = Launches();
  ASSERT_EQ(launches.size(), 2u);
  const std::string version =
      DatasetVersion("cold:sets/a", {{"x.bin", 100, "", "2026-01-01T00:00:00Z"},
                                     {"y.bin", 20, "md5:ab", ""}});
  int fillers = 0;  // nodes that read the cold store: one
  for (const AgentAction& a : launches) {
    ASSERT_TRUE(a.body.contains("data")) << a.body.dump();
    const nlohmann::json& d = a.body["data"][0];
    EXPECT_EQ(d["source"], "cold:sets/a");
    EXPECT_EQ(d["mount"], "/data/a");
    EXPECT_EQ(d["version"], version);
    EXPECT_EQ(d["files"], 2);
    EXPECT_EQ(d["bytes"], 120);
    if (d["fill_from_store"].get<bool>()) {
      ++fillers;  // no one holds it yet: no peers
      EXPECT_TRUE(d["peers"].empty()) << d.dump();
      continue;
    }
    ASSERT_EQ(d["peers"].size(), 1u) << d.dump();
    EXPECT_NE(d["peers"][0]["node"], a.node);
    EXPECT_EQ(d["peers"][0]["address"],
              a.node == "h200-0" ? "127.0.0.3:7100" : "127.0.0.2:7100");
  }
  EXPECT_EQ(fillers, 1);
  // A node fills its cache: `loom show` says so, with the bytes.
  for (const AgentAction& a : launches) {
    c_->ActionDone(a, absl::OkStatus(), T(1.2), /*started=*/false);
  }
  auto r = c_->Heartbeat({{"name", launches[0].node},
                          {"tasks",
                           {{{"task_id", launches[0].task_id},
                             {"state", "pulling"},
                             {"pull",
                              {{"phase", "dataset"},
                               {"bytes_done", 60},
                               {"bytes_total", 120}}}}}}},
                         T(1.3));
  ASSERT_TRUE(r.ok()) << r.status();
  nlohmann::json job = Job(1, 1.3);
  EXPECT_EQ(job["reason"].get<std::string>().rfind(
                "filling dataset cache: 60 of 120 B on " + launches[0].node, 0),
            0u)
      << job.dump(1);
  EXPECT_NE(job.dump().find("fills its dataset cache"), std::string::npos);
  // A job without datasets has no `data` and is never listed.
  const int calls = lister_.calls();
  ASSERT_TRUE(
      c_->Submit(Spec("name: plain\ncommand: [cat]\n"), "alice", T(2)).ok());
  EXPECT_EQ(lister_.calls(), calls);
}

TEST_F(DatasetsTest, OneColdReadPerLeafAndHoldersServeTheirLeaf) {
  const std::vector<DatasetEntry> files = {{"x.bin", 100, "md5:01", ""}};
  const std::string version = DatasetVersion("cold:sets/a", files);
  lister_.Set("cold:sets/a", files);
  auto run = [&](double t) {
    const std::string spec =
        "name: read\ncommand: [cat]\ntasks: 4\n"
        "resources: {gpus_per_task: 8}\n"
        "data: [{source: 'cold:sets/a', mount: /data/a}]\n";
    EXPECT_TRUE(c_->Submit(Spec(spec), "alice", T(t)).ok());
    c_->Tick(T(t));
    Settle(t + 0.1);
    std::map<std::string, nlohmann::json> by_node;
    for (const AgentAction& a : Launches()) by_node[a.node] = a.body["data"][0];
    return by_node;
  };
  // Four nodes, two under each leaf, none holding the version: one node per
  // leaf reads the cold store, its neighbour waits for it and copies.
  Start(MakeCluster({{4, 0}}, 2, 2), 4);
  std::map<std::string, nlohmann::json> d = run(2);
  ASSERT_EQ(d.size(), 4u);
  int fillers = 0;
  for (const auto& [node, item] : d) {
    if (item["fill_from_store"].get<bool>()) {
      ++fillers;
      EXPECT_TRUE(item["peers"].empty()) << node << " " << item.dump();
      continue;
    }
    // The waiting node's first peer is the other node under its leaf.
    const int n = node.back() - '0';
    ASSERT_EQ(item["peers"].size(), 1u) << item.dump();
    EXPECT_EQ(item["peers"][0]["node"], "h200-" + std::to_string(n ^ 1));
    EXPECT_TRUE(
        d["h200-" + std::to_string(n ^ 1)]["fill_from_store"].get<bool>());
  }
  EXPECT_EQ(fillers, 2);  // one per leaf, not per node
  // h200-1 (first leaf) and h200-3 (second) hold it: every node copies from
  // the holder under its own leaf, nobody waits, the other leaf's holder
  // comes after (the cold store only if both fail).
  Start(MakeCluster({{4, 0}}, 2, 2), 4, {{1, {version}}, {3, {version}}});
  d = run(3);
  ASSERT_EQ(d.size(), 4u);
  for (const auto& [node, item] : d) {
    EXPECT_TRUE(item["fill_from_store"].get<bool>()) << item.dump();
    const int n = node.back() - '0';
    const bool holds = n == 1 || n == 3;
    ASSERT_EQ(item["peers"].size(), holds ? 1u : 2u) << node << item.dump();
    EXPECT_EQ(item["peers"][0]["node"], holds ? (n == 1 ? "h200-3" : "h200-1")
                                              : "h200-" + std::to_string(n | 1))
        << node << item.dump();
  }
}

TEST_F(DatasetsTest, NamedDatasetsAndWhatTheirFillsTook) {
  const std::vector<DatasetEntry> files = {{"x.bin", 100, "md5:01", ""}};
  lister_.Set("cold:sets/a", files);
  const std::string version = DatasetVersion("cold:sets/a", files);
  // Added, refused twice, listed; kept in the store.
  auto added = c_->AddDataset(
      {{"name", "set-a"}, {"source", "cold:sets/a"}, {"description", "A"}},
      "ops", T(1));
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(
      c_->AddDataset({{"name", "set-a"}, {"source", "cold:b"}}, "ops", T(1))
          .status()
          .code(),
      absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(
      c_->AddDataset({{"name", "Bad Name"}, {"source", "cold:b"}}, "ops", T(1))
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      c_->AddDataset({{"name", "b"}, {"source", ":s3,key=x:b"}}, "ops", T(1))
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(store_->Get("/datasets/set-a").ok());
  // A job names it: the source comes from the catalog; a name not known is
  // refused at submit, nothing created.
  auto bad =
      c_->Submit(Spec("name: r\ncommand: [cat]\ndata: [{dataset: nope}]\n"),
                 "alice", T(2));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("data[0].dataset: no dataset named"),
            std::string::npos)
      << bad.status();
  auto job = c_->Submit(Spec("name: r\ncommand: [cat]\ntasks: 2\n"
                             "resources: {gpus_per_task: 8}\n"
                             "data: [{dataset: set-a}]\n"),
                        "alice", T(2));
  ASSERT_TRUE(job.ok()) << job.status();
  Settle(2.1);
  std::vector<AgentAction> launches = Launches();
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].body["data"][0]["source"], "cold:sets/a");
  EXPECT_EQ(launches[0].body["data"][0]["mount"], "/data/set-a");
  // The tasks run; one node filled (cold), the other copied from it. The
  // reports count once per task, however many heartbeats repeat them.
  for (const AgentAction& a : launches) {
    c_->ActionDone(a, absl::OkStatus(), T(2.2), /*started=*/true);
  }
  for (int beat = 0; beat < 3; ++beat) {
    for (const AgentAction& a : launches) {
      const bool filler = a.body["data"][0]["fill_from_store"].get<bool>();
      nlohmann::json item = {{"source", "cold:sets/a"},
                             {"version", version},
                             {"cached_bytes", 0},
                             {"peer_bytes", filler ? 0 : 100},
                             {"cold_bytes", filler ? 100 : 0},
                             {"fill_ms", 500},
                             {"verified_files", 1}};
      auto r = c_->Heartbeat({{"name", a.node},
                              {"tasks",
                               {{{"task_id", a.task_id},
                                 {"state", "running"},
                                 {"data", nlohmann::json::array({item})}}}}},
                             T(3 + beat));
      ASSERT_TRUE(r.ok()) << r.status();
    }
  }
  nlohmann::json list = c_->ListDatasets()["datasets"];
  ASSERT_EQ(list.size(), 1u) << list.dump(1);
  const nlohmann::json& use = list[0]["use"];
  EXPECT_EQ(list[0]["name"], "set-a");
  EXPECT_EQ(list[0]["description"], "A");
  EXPECT_EQ(use["starts"], 2);
  EXPECT_EQ(use["fills"], 2);
  EXPECT_EQ(use["cold_bytes"], 100);
  EXPECT_EQ(use["peer_bytes"], 100);
  EXPECT_EQ(use["hit_ratio"], 0.0);
  EXPECT_EQ(use["fill_seconds_mean"], 0.5);
  EXPECT_EQ(use["version"], version);
  std::string text;
  MetricsWriter w(&text);
  c_->WriteMetrics(w, T(6));
  EXPECT_TRUE(w.status().ok()) << w.status();
  EXPECT_NE(text.find("loom_dataset_read_bytes_total{dataset=\"set-a\","
                      "from=\"cold\"} 100"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("loom_dataset_task_starts_total{dataset=\"set-a\","
                      "result=\"fill\"} 2"),
            std::string::npos);
  // Removed: gone from the store; a second removal is NotFound. Its use
  // stays listed under its name, with its source, marked removed.
  EXPECT_TRUE(c_->RemoveDataset("set-a").ok());
  EXPECT_EQ(c_->RemoveDataset("set-a").code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(store_->Get("/datasets/set-a").ok());
  list = c_->ListDatasets()["datasets"];
  ASSERT_EQ(list.size(), 1u) << list.dump(1);
  EXPECT_EQ(list[0]["name"], "set-a");
  EXPECT_EQ(list[0]["source"], "cold:sets/a");
  EXPECT_EQ(list[0]["removed"], true);
  EXPECT_EQ(list[0]["use"]["starts"], 2);
}

TEST_F(DatasetsTest, StoreDownKeepsTheJobPendingWithTheReason) {
  ASSERT_TRUE(c_->Submit(Spec(kSpec), "alice", T(1)).ok());
  Settle(1.1);
  EXPECT_TRUE(Launches().empty());
  nlohmann::json job = Job(1, 1.1);
  EXPECT_EQ(job["state"], "pending");
  EXPECT_EQ(job["reason"],
            "dataset cold:sets/a: cold store unreachable: connection refused");
  // Asked again after the backoff; the store is back: it starts.
  lister_.Set("cold:sets/a", {{"x.bin", 1, "", "t"}});
  c_->Tick(T(1.5));  // before the backoff: not asked
  Settle(1.6);
  EXPECT_TRUE(Launches().empty());
  c_->Tick(T(3.2));  // asks again
  Settle(3.3);
  EXPECT_EQ(Launches().size(), 2u);
  EXPECT_EQ(Job(1, 3.3)["state"], "running");
}

TEST_F(DatasetsTest, LocalSourcesAndMountsFollowTheClustersPolicy) {
  auto submit = [&](const std::string& source, const std::string& mount) {
    return c_->Submit(
        Spec(absl::StrCat("name: r\ncommand: [cat]\nresources: {gpus: 1}\n",
                          "data: [{source: '", source, "', mount: '", mount,
                          "'}]\n")),
        "alice", T(1));
  };
  // By default no local directory is a source, and mounts stay under
  // /data, /datasets and /mnt.
  absl::StatusOr<nlohmann::json> r = submit("/etc/shadow", "/data/x");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr("data[0].source: '/etc/shadow' is a local path"));
  EXPECT_THAT(submit("cold:a", "/etc/pam.d").status().message(),
              HasSubstr("data[0].mount: '/etc/pam.d' is a system directory"));
  EXPECT_THAT(submit("cold:a", "/home/alice/x").status().message(),
              HasSubstr("datasets.mount_roots"));
  EXPECT_EQ(lister_.calls(), 0);  // nothing was listed for them

  // A cluster that lets jobs read /nfs/sets, on a pool that allows
  // privilege escalation: the source is listed as the job's user, and
  // the launches say what the pool allows.
  Cluster cluster = MakeCluster({{2, 0}}, 4, 8);
  cluster.datasets.local_roots = {"/nfs/sets"};
  cluster.pools[0].allow_privilege_escalation = true;
  Start(std::move(cluster), 2);
  lister_.Set("/nfs/sets/a", {{"x.bin", 3, "", "t"}});
  ASSERT_TRUE(submit("/nfs/sets/a", "/data/a").ok());
  EXPECT_THAT(submit("/nfs/other", "/data/a").status().message(),
              HasSubstr("datasets.local_roots (/nfs/sets)"));
  c_->Tick(T(1));
  Settle(1.1);
  std::vector<AgentAction> launches = Launches();
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].body["allow_privilege_escalation"], true);
  EXPECT_EQ(lister_.users(), std::vector<std::string>{"alice"});
}

TEST_F(DatasetsTest, AListingTheUserMayNotMakeKeepsTheJobPendingSayingWhy) {
  Cluster cluster = MakeCluster({{2, 0}}, 4, 8);
  cluster.datasets.local_roots = {"/nfs"};
  Start(std::move(cluster), 2);
  lister_.Deny("/nfs/bob", "user alice cannot list it: permission denied");
  ASSERT_TRUE(c_->Submit(Spec("name: r\ncommand: [cat]\nresources: {gpus: "
                              "1}\ndata: [{source: /nfs/bob, mount: /data/b}]\n"),
                         "alice", T(1))
                  .ok());
  c_->Tick(T(1));
  Settle(1.1);
  EXPECT_TRUE(Launches().empty());
  EXPECT_EQ(Job(1, 1.1)["reason"],
            "dataset /nfs/bob: user alice cannot list it: permission denied");
  // No launch by default asks for privilege escalation.
  lister_.Set("cold:sets/a", {{"x.bin", 1, "", "t"}});
  ASSERT_TRUE(c_->Submit(Spec(kSpec), "alice", T(2)).ok());
  c_->Tick(T(2));
  Settle(2.1);
  std::vector<AgentAction> launches = Launches();
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_FALSE(launches[0].body.contains("allow_privilege_escalation"));
}

TEST_F(DatasetsTest, CancelWhileListing) {
  ASSERT_TRUE(c_->Submit(Spec(kSpec), "alice", T(1)).ok());
  ASSERT_TRUE(c_->Cancel(1, T(1.05)).ok());
  lister_.Set("cold:sets/a", {{"x.bin", 1, "", "t"}});
  Settle(1.1);
  EXPECT_TRUE(Launches().empty());
  EXPECT_EQ(Job(1, 1.1)["state"], "cancelled");
}

TEST(DatasetListerTest, ParsesRcloneLsjson) {
  absl::StatusOr<std::vector<DatasetEntry>> e = ParseRcloneLsjson(
      R"([{"Path":"d","Name":"d","Size":-1,"IsDir":true},
          {"Path":"d/a.bin","Name":"a.bin","Size":5,"ModTime":"2026-01-01T00:00:00Z","IsDir":false},
          {"Path":"b","Size":7,"ModTime":"x","IsDir":false,"Hashes":{"md5":"ff","sha1":"aa"}}])");
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->size(), 2u);
  EXPECT_EQ((*e)[0].path, "d/a.bin");
  EXPECT_EQ((*e)[0].size, 5);
  EXPECT_EQ((*e)[0].modtime, "2026-01-01T00:00:00Z");
  EXPECT_EQ((*e)[1].hash, "md5:ff");
  DatasetListing l = SummarizeListing("cold:sets/a", *e);
  EXPECT_EQ(l.files, 2);
  EXPECT_EQ(l.bytes, 12);
  EXPECT_FALSE(ParseRcloneLsjson("{").ok());
  EXPECT_FALSE(ParseRcloneLsjson(R"([{"Size":1}])").ok());
  EXPECT_FALSE(ParseRcloneLsjson(R"([1])").ok());
}

TEST(DatasetListerTest, RunForOutputReportsFailuresAndTimeouts) {
  absl::StatusOr<std::string> ok =
      RunForOutput({"sh", "-c", "echo hi"}, absl::Seconds(10), 1024);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, "hi\n");
  absl::StatusOr<std::string> bad =
      RunForOutput({"sh", "-c", "echo one >&2; echo 'no route' >&2; exit 3"},
                   absl::Seconds(10), 1024);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(bad.status().message(), "no route");
  absl::StatusOr<std::string> slow =
      RunForOutput({"sleep", "10"}, absl::Milliseconds(200), 1024);
  EXPECT_EQ(slow.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(RunForOutput({"/nonexistent/x"}, absl::Seconds(5), 1024).ok());
}

// Locality and prefetch (controller_data_locality.cc): nodes report the
// versions their caches hold; a job prefers the node that holds its
// version, and a reserved gang's nodes that lack it are asked to fill it.
class DataLocalityTest : public DatasetsTest {
 protected:
  DataLocalityTest() {
    lister_.Set("cold:sets/a", {{"x.bin", 100, "", "2026-01-01T00:00:00Z"}});
  }
  std::string Version() const {
    return DatasetVersion("cold:sets/a",
                          {{"x.bin", 100, "", "2026-01-01T00:00:00Z"}});
  }
  void Reports(const std::string& node, nlohmann::json datasets, double t) {
    auto r = c_->Heartbeat({{"name", node},
                            {"tasks", nlohmann::json::array()},
                            {"datasets", std::move(datasets)}},
                           T(t));
    ASSERT_TRUE(r.ok()) << r.status();
  }
};

TEST_F(DataLocalityTest, AJobPrefersTheNodeThatHoldsItsVersion) {
  // Malformed entries are dropped, the rest kept; a list that is not one
  // is ignored.
  Reports("h200-1", {Version(), "not-a-version", 3, nullptr}, 1.5);
  Reports("h200-0", "bogus", 1.6);
  ASSERT_TRUE(
      c_->Submit(Spec("name: one\ncommand: [cat]\ntasks: 1\n"
                      "resources: {gpus_per_task: 8}\n"
                      "data: [{source: 'cold:sets/a', mount: /data/a}]\n"),
                 "alice", T(2))
          .ok());
  Settle(2.1);
  std::vector<AgentAction> launches = Launches();
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].node, "h200-1");
  EXPECT_EQ(launches[0].body["data"][0]["version"], Version());
}

TEST_F(DataLocalityTest, AReservedGangsNodesPrefetchItsData) {
  // Job 1 holds one node until t=100; the gang needs both nodes, and only
  // the free one holds its version.
  ASSERT_TRUE(
      c_->Submit(Spec("name: hold\ncommand: [cat]\ntasks: 1\n"
                      "resources: {gpus_per_task: 8}\ntime_limit: 100s\n"),
                 "alice", T(2))
          .ok());
  c_->Tick(T(2));
  std::vector<AgentAction> launches = Launches();
  ASSERT_EQ(launches.size(), 1u);
  const std::string busy = launches[0].node;
  const std::string free = busy == "h200-0" ? "h200-1" : "h200-0";
  Reports(free, {Version()}, 2.5);
  ASSERT_TRUE(c_->Submit(Spec(kSpec), "alice", T(3)).ok());
  c_->WaitForDatasetListings();
  c_->Tick(T(3.1));
  std::vector<AgentAction> prefetches;
  for (AgentAction& a : c_->TakeActions()) {
    EXPECT_NE(a.kind, AgentAction::Kind::kLaunch) << a.body.dump();
    if (a.kind == AgentAction::Kind::kPrefetch) {
      prefetches.push_back(std::move(a));
    }
  }
  ASSERT_EQ(prefetches.size(), 1u);
  EXPECT_EQ(prefetches[0].node, busy);
  EXPECT_EQ(prefetches[0].job, 2);
  const nlohmann::json& d = prefetches[0].body["data"];
  ASSERT_EQ(d.size(), 1u) << d.dump();
  EXPECT_EQ(d[0]["source"], "cold:sets/a");
  EXPECT_EQ(d[0]["mount"], "/data/a");
  EXPECT_EQ(d[0]["version"], Version());
  EXPECT_EQ(d[0]["files"], 1);
  EXPECT_EQ(d[0]["bytes"], 100);
  EXPECT_NE(Job(2, 3.1).dump().find("prefetching dataset cold:sets/a"),
            std::string::npos);
  // Delivered (the agent answered 202): nothing else follows, and the next
  // pass keeps the reservation without asking again.
  c_->ActionDone(prefetches[0], absl::OkStatus(), T(3.2), /*started=*/false);
  c_->Tick(T(4));
  for (const AgentAction& a : c_->TakeActions()) {
    EXPECT_NE(a.kind, AgentAction::Kind::kPrefetch);
  }
  // The node's report of what the fill copied is counted once, under the
  // dataset's source: a second report of it, one from a node not asked and
  // a malformed one are not.
  auto prefetched = [&](const std::string& node, nlohmann::json items) {
    auto r = c_->Heartbeat({{"name", node},
                            {"tasks", nlohmann::json::array()},
                            {"prefetched", std::move(items)}},
                           T(5));
    ASSERT_TRUE(r.ok()) << r.status();
  };
  const nlohmann::json item = {
      {"source", "cold:sets/a"}, {"version", Version()}, {"peer_bytes", 0},
      {"cold_bytes", 100},       {"fill_ms", 1500},      {"verified_files", 1}};
  prefetched(free, {item});
  prefetched(busy, {item, 7, {{"version", 3}}});
  prefetched(busy, {item});
  nlohmann::json listed = c_->ListDatasets()["datasets"];
  ASSERT_EQ(listed.size(), 1u) << listed.dump();
  const nlohmann::json& use = listed[0]["use"];
  EXPECT_EQ(listed[0]["source"], "cold:sets/a");
  EXPECT_EQ(use["prefetches"], 1) << use.dump();
  EXPECT_EQ(use["prefetch_cold_bytes"], 100);
  EXPECT_EQ(use["prefetch_peer_bytes"], 0);
  EXPECT_EQ(use["prefetch_seconds_mean"], 1.5);
  EXPECT_EQ(use["starts"], 0);  // not a task start
  EXPECT_EQ(use["cold_bytes"], 0);
  std::string metrics;
  MetricsWriter w(&metrics);
  c_->WriteMetrics(w, T(6));
  EXPECT_TRUE(w.status().ok()) << w.status();
  EXPECT_NE(metrics.find("loom_dataset_prefetches_total{dataset=\"cold:sets/"
                         "a\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("loom_dataset_prefetch_bytes_total{dataset=\"cold:"
                         "sets/a\",from=\"cold\"} 100"),
            std::string::npos);
}

// Prefetches read the cold store once per leaf, as launches do: four
// reserved nodes lacking the version, two under each leaf; per leaf one
// reads the store and the other waits for it and copies from it.
TEST_F(DataLocalityTest, PrefetchesReadTheColdStoreOncePerLeaf) {
  Start(MakeCluster({{4, 0}}, 2, 2), 4);
  ASSERT_TRUE(
      c_->Submit(Spec("name: hold\ncommand: [cat]\ntasks: 1\n"
                      "resources: {gpus_per_task: 8}\ntime_limit: 100s\n"),
                 "alice", T(2))
          .ok());
  c_->Tick(T(2));
  ASSERT_EQ(Launches().size(), 1u);
  ASSERT_TRUE(
      c_->Submit(Spec("name: read\ncommand: [cat]\ntasks: 4\n"
                      "resources: {gpus_per_task: 8}\n"
                      "data: [{source: 'cold:sets/a', mount: /data/a}]\n"),
                 "alice", T(3))
          .ok());
  c_->WaitForDatasetListings();
  c_->Tick(T(3.1));
  std::map<std::string, nlohmann::json> by_node;
  for (AgentAction& a : c_->TakeActions()) {
    if (a.kind != AgentAction::Kind::kPrefetch) continue;
    ASSERT_EQ(a.body["data"].size(), 1u) << a.body.dump();
    by_node[a.node] = a.body["data"][0];
  }
  ASSERT_EQ(by_node.size(), 4u);
  int fillers = 0;
  for (const auto& [node, item] : by_node) {
    EXPECT_EQ(item["version"], Version());
    if (item["fill_from_store"].get<bool>()) {
      ++fillers;
      EXPECT_TRUE(item["peers"].empty()) << node << " " << item.dump();
      continue;
    }
    const int n = node.back() - '0';
    ASSERT_EQ(item["peers"].size(), 1u) << item.dump();
    EXPECT_EQ(item["peers"][0]["node"], "h200-" + std::to_string(n ^ 1));
    EXPECT_TRUE(by_node["h200-" + std::to_string(n ^ 1)]["fill_from_store"]
                    .get<bool>());
  }
  EXPECT_EQ(fillers, 2);  // one per leaf, not per node
}

}  // namespace
}  // namespace loom
