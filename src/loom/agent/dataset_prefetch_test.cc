// `POST /v1/datasets/prefetch` (dataset_prefetch.h): an agent fills a
// version the server asks for, in the background, and its next heartbeat
// lists it (docs/datasets.md, "Locality and prefetch").

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/fake_dataset_filler.h"

namespace loom {
namespace agent_testing {
namespace {

std::unique_ptr<DatasetFiller> TwoFiles(const std::string&) {
  auto f = std::make_unique<FakeFiller>();
  f->files = {{"a.bin", "aaaa"}, {"d/b.bin", "bbbbbbbb"}};
  return f;
}

TEST(DatasetPrefetchTest, FillsInTheBackgroundAndHeartbeatsReportIt) {
  FakeServer server;
  TempDir dir;
  AgentOptions options = BaseOptions(server, dir.path());
  options.dataset_filler = TwoFiles;
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return server.registration_count("h200-0"); }));
  // The registration lists the node's complete versions: none yet.
  EXPECT_EQ(server.registrations()[0]["datasets"], json::array());

  FakeFiller store;
  store.files = {{"a.bin", "aaaa"}, {"d/b.bin", "bbbbbbbb"}};
  const std::string version = DatasetVersion("cold:sets/a", store.Listing());
  const json item = {{"source", "cold:sets/a"},
                     {"mount", "/data/a"},
                     {"version", version},
                     {"files", 2},
                     {"bytes", 12},
                     {"fill_from_store", true}};
  AgentClient client(*agent);
  httplib::Result r =
      client.Post("/v1/datasets/prefetch", json{{"data", json::array({item})}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 202) << r->body;
  EXPECT_EQ(json::parse(r->body)["datasets"][0]["state"], "started");

  auto reported = [&] {
    for (const json& hb : server.Heartbeats("h200-0")) {
      if (hb.contains("datasets") && hb["datasets"] == json::array({version}))
        return true;
    }
    return false;
  };
  ASSERT_TRUE(WaitFor(reported)) << "no heartbeat listed " << version;
  // What the fill copied, said once (the server answered): 12 bytes from
  // the cold store.
  auto prefetched = [&] {
    std::vector<json> out;
    for (const json& hb : server.Heartbeats("h200-0")) {
      if (hb.contains("prefetched")) out.push_back(hb["prefetched"]);
    }
    return out;
  };
  ASSERT_TRUE(WaitFor([&] { return !prefetched().empty(); }));
  const json said = prefetched()[0];
  ASSERT_EQ(said.size(), 1u) << said;
  EXPECT_EQ(said[0]["version"], version);
  EXPECT_EQ(said[0]["source"], "cold:sets/a");
  EXPECT_EQ(said[0]["cold_bytes"], 12);
  EXPECT_EQ(said[0]["peer_bytes"], 0);
  EXPECT_TRUE(fs::exists(
      absl::StrCat(dir.path(), "/datasets/", version, "/data/d/b.bin")));
  // Complete now: asked again, nothing to do; and later heartbeats leave
  // the unchanged list out.
  r = client.Post("/v1/datasets/prefetch", json{{"data", json::array({item})}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["datasets"][0]["state"], "present");
  const size_t seen = server.Heartbeats("h200-0").size();
  ASSERT_TRUE(
      WaitFor([&] { return server.Heartbeats("h200-0").size() >= seen + 2; }));
  EXPECT_FALSE(server.Heartbeats("h200-0").back().contains("datasets"));
  EXPECT_EQ(prefetched().size(), 1u);  // the second fill copied nothing
}

TEST(DatasetPrefetchTest, RefusesABadBody) {
  FakeServer server;
  TempDir dir;
  AgentOptions options = BaseOptions(server, dir.path());
  options.dataset_filler = TwoFiles;
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  for (const std::string body :
       {"", "[]", R"({"data": 3})",
        R"({"data": [{"source": "cold:a", "mount": "/d", "version": "x"}]})"}) {
    httplib::Result r = client.Post("/v1/datasets/prefetch", body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body << ": " << r->body;
  }
}

}  // namespace
}  // namespace agent_testing
}  // namespace loom
