// Jobs in container images at the server: the checks of POST /v1/jobs with
// a fake resolver (no registry), the digest recorded and the launch body.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/sched/test_util.h"
#include "loom/server/container_check.h"
#include "loom/server/controller.h"
#include "loom/server/controller_test_util.h"
#include "loom/server/http_server.h"
#include "loom/server/idempotency_keys.h"
#include "loom/server/image_resolver.h"
#include "loom/store/memory_state_store.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using testing::Spec;
using testing::T;

constexpr char kDigest[] =
    "sha256:1111111111111111111111111111111111111111111111111111111111111111";
constexpr char kOtherDigest[] =
    "sha256:2222222222222222222222222222222222222222222222222222222222222222";

// Answers from a table keyed by `ImageRef::ToString()`; anything else is
// NotFound, or `fail` when set. Counts the calls.
class FakeImageResolver : public ImageResolver {
 public:
  absl::StatusOr<std::string> Resolve(const image::ImageRef& ref) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    asked_.push_back(ref.ToString());
    if (!fail_.ok()) return fail_;
    auto it = digests_.find(ref.ToString());
    if (it == digests_.end()) {
      return absl::NotFoundError(
          absl::StrCat("registry ", ref.registry, ": manifest ", ref.ToString(),
                       " is unknown (MANIFEST_UNKNOWN)"));
    }
    return it->second;
  }
  void Set(const std::string& ref, const std::string& digest) {
    absl::MutexLock lock(&mu_);
    digests_[ref] = digest;
  }
  void Fail(absl::Status st) {
    absl::MutexLock lock(&mu_);
    fail_ = std::move(st);
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  std::vector<std::string> asked() {
    absl::MutexLock lock(&mu_);
    return asked_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> digests_ ABSL_GUARDED_BY(mu_);
  absl::Status fail_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> asked_ ABSL_GUARDED_BY(mu_);
};

Cluster ClusterWithMounts() {
  Cluster c = testing::MakeCluster({{2, 0}}, 2, 8);
  c.containers.allowed_mounts = {"/data", "/scratch"};
  return c;
}

// A job body in an image: `container` is the JSON of the field.
std::string Body(const std::string& container) {
  return absl::StrCat(R"({"name": "train", "command": ["python", "t.py"], )",
                      R"("container": )", container, "}");
}

class ContainerSubmitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    resolver_.Set("localhost:5000/team/train:1.4", kDigest);
    auto c =
        Controller::Create(cluster_, &store_, ControllerOptions{}, absl::Now());
    ASSERT_TRUE(c.ok());
    controller_ = *std::move(c);
    HttpServerOptions o;
    o.port = 0;
    o.image_resolver = with_resolver_ ? &resolver_ : nullptr;
    server_ = std::make_unique<HttpServer>(controller_.get(), o);
    auto port = server_->Start();
    ASSERT_TRUE(port.ok()) << port.status();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
  }
  void TearDown() override { server_->Stop(); }

  nlohmann::json Post(const std::string& body, int want,
                      const std::string& key = "") {
    httplib::Headers headers;
    if (!key.empty()) headers.emplace("Idempotency-Key", key);
    auto r = client_->Post("/v1/jobs", headers, body, "application/json");
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, want) << body << ": " << r->body;
    return nlohmann::json::parse(r->body, nullptr, false);
  }
  size_t JobCount() {
    return controller_->ListJobs({}, absl::Now())["jobs"].size();
  }

  Cluster cluster_ = ClusterWithMounts();
  bool with_resolver_ = true;
  FakeImageResolver resolver_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(ContainerSubmitTest, TheTagIsResolvedAndRecorded) {
  nlohmann::json j = Post(Body(R"({"image": "localhost:5000/team/train:1.4",
               "mounts": ["/data/sets:/data:ro"], "shm_size": "1Gi"})"),
                          201);
  EXPECT_EQ(resolver_.calls(), 1);
  const nlohmann::json& c = j["spec"]["container"];
  EXPECT_EQ(c["image"], "localhost:5000/team/train:1.4");
  EXPECT_EQ(c["image_digest"], kDigest);
  EXPECT_EQ(c["mounts"], nlohmann::json({"/data/sets:/data:ro"}));
  // What a new leader reads back from the store has it too.
  auto again = Controller::Create(ClusterWithMounts(), &store_,
                                  ControllerOptions{}, absl::Now());
  ASSERT_TRUE(again.ok());
  absl::StatusOr<nlohmann::json> stored = (*again)->GetJob(1, absl::Now());
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ((*stored)["spec"]["container"]["image_digest"], kDigest);
}

TEST_F(ContainerSubmitTest, AReferenceWithADigestIsCheckedByTheSameCall) {
  const std::string ref = absl::StrCat("localhost:5000/team/train@", kDigest);
  resolver_.Set(ref, kDigest);
  nlohmann::json j =
      Post(Body(absl::StrCat(R"({"image": ")", ref, R"("})")), 201);
  EXPECT_EQ(j["spec"]["container"]["image_digest"], kDigest);
  EXPECT_THAT(resolver_.asked(), ::testing::ElementsAre(ref));
}

// A digest the user wrote into the spec is replaced by the registry's.
TEST_F(ContainerSubmitTest, TheServerSetsTheDigest) {
  nlohmann::json j =
      Post(Body(absl::StrCat(R"({"image": "localhost:5000/team/train:1.4", )",
                             R"("image_digest": ")", kOtherDigest, R"("})")),
           201);
  EXPECT_EQ(j["spec"]["container"]["image_digest"], kDigest);
}

// Each bad input is answered with its field and reason; nothing is stored
// and, for those caught before the registry, the registry is not asked.
TEST_F(ContainerSubmitTest, BadInputIsRefusedAndNothingIsStored) {
  struct Case {
    std::string container;
    int status;
    std::string field;
    std::string message;  // a part of it
    bool asks_registry;
  };
  const std::vector<Case> cases = {
      {R"({"image": "busybox:1.36"})", 400, "container.image",
       "no registry host", false},
      {R"({"image": "localhost:5000/Team/train"})", 400, "container.image",
       "is not an image reference", false},
      {R"({"image": "localhost:5000/team/train:1.4",
           "mounts": ["/data:/data", "/etc:/etc2:ro"]})",
       400, "container.mounts[1]",
       "'/etc' is not under a directory the cluster allows to be mounted "
       "(/data, /scratch)",
       false},
      {R"({"image": "localhost:5000/team/train:1.4",
           "mounts": ["/data/x:rel"]})",
       400, "container.mounts[0]", "destination must be an absolute path",
       false},
      {R"({"image": "localhost:5000/team/train:2.0"})", 400, "container.image",
       "'localhost:5000/team/train:2.0' not found", true},
  };
  for (const Case& c : cases) {
    const int before = resolver_.calls();
    nlohmann::json e = Post(Body(c.container), c.status);
    EXPECT_EQ(e["error"]["field"], c.field) << c.container;
    EXPECT_THAT(e["error"]["message"].get<std::string>(), HasSubstr(c.message))
        << c.container;
    EXPECT_EQ(resolver_.calls() - before, c.asks_registry ? 1 : 0)
        << c.container;
  }
  EXPECT_EQ(JobCount(), 0u);
  EXPECT_FALSE(store_.Get(JobKey(1)).ok());
}

TEST_F(ContainerSubmitTest, RegistryFailuresAre503Or400) {
  const std::string body =
      Body(R"({"image": "localhost:5000/team/train:1.4"})");
  resolver_.Fail(absl::UnavailableError("registry localhost:5000: refused"));
  nlohmann::json e = Post(body, 503);
  EXPECT_EQ(e["error"]["code"], "unavailable");
  EXPECT_THAT(e["error"]["message"].get<std::string>(),
              HasSubstr("the registry localhost:5000 cannot be reached"));
  for (const absl::Status& s :
       {absl::UnauthenticatedError("registry localhost:5000 needs credentials "
                                   "for team/train: none configured for "
                                   "localhost:5000"),
        absl::PermissionDeniedError("registry localhost:5000 refused the "
                                    "credentials for team/train (f)")}) {
    resolver_.Fail(s);
    e = Post(body, 400);
    EXPECT_EQ(e["error"]["field"], "container.image");
    EXPECT_EQ(
        e["error"]["message"].get<std::string>(),
        absl::StrCat("container.image: cannot read "
                     "'localhost:5000/team/train:1.4' from its registry: ",
                     s.message()));
  }
  resolver_.Fail(absl::DataLossError("registry says it is another digest"));
  e = Post(body, 400);
  EXPECT_EQ(e["error"]["field"], "container.image");
  EXPECT_EQ(JobCount(), 0u);
  EXPECT_FALSE(store_.Get(JobKey(1)).ok());
}

// A retried submission (its answer was lost) gets its job back without a
// second registry request, even while the registry is down.
TEST_F(ContainerSubmitTest, AnIdempotentRetryDoesNotAskTheRegistryAgain) {
  const std::string body =
      Body(R"({"image": "localhost:5000/team/train:1.4"})");
  nlohmann::json first = Post(body, 201, "k1");
  EXPECT_EQ(resolver_.calls(), 1);
  resolver_.Fail(absl::UnavailableError("down"));
  nlohmann::json again = Post(body, 200, "k1");
  EXPECT_EQ(again["id"], first["id"]);
  EXPECT_EQ(resolver_.calls(), 1);
  // A new key is a new job, and needs the registry.
  Post(body, 503, "k2");
  EXPECT_EQ(JobCount(), 1u);
}

// The same request digest whatever the registry answered, so that a retry
// that resolved the tag again (after it moved) is still the same request.
TEST(RequestDigest, LeavesOutTheImageDigest) {
  JobSpec spec =
      Spec("name: t\ncommand: [x]\ncontainer: {image: localhost:5000/a:1}\n");
  JobSpec a = spec;
  a.container->image_digest = kDigest;
  JobSpec b = spec;
  b.container->image_digest = kOtherDigest;
  EXPECT_EQ(RequestDigest(a), RequestDigest(b));
  EXPECT_EQ(RequestDigest(a), RequestDigest(spec));
  b.container->image = "localhost:5000/a:2";
  EXPECT_NE(RequestDigest(a), RequestDigest(b));
}

class NoResolverTest : public ContainerSubmitTest {
 protected:
  void SetUp() override {
    with_resolver_ = false;
    ContainerSubmitTest::SetUp();
  }
};

TEST_F(NoResolverTest, ContainerJobsAreRefusedOthersRun) {
  nlohmann::json e =
      Post(Body(R"({"image": "localhost:5000/team/train:1.4"})"), 409);
  EXPECT_THAT(e["error"]["message"].get<std::string>(),
              HasSubstr("cannot resolve images"));
  Post(R"({"name": "plain", "command": ["true"]})", 201);
  EXPECT_EQ(JobCount(), 1u);
}

// `containers.allowed_registries`: a reference to any other registry is a
// 400 naming the field, and the server connects nowhere for it.
class AllowedRegistriesTest : public ContainerSubmitTest {
 protected:
  void SetUp() override {
    cluster_.containers.allowed_registries = {"localhost:5000",
                                              "registry.example.com"};
    resolver_.Set("registry.example.com/team/train:1.4", kDigest);
    ContainerSubmitTest::SetUp();
  }
};

TEST_F(AllowedRegistriesTest, OnlyTheListedRegistriesAreAsked) {
  for (const char* image : {"localhost:5000/team/train:1.4",
                            "registry.example.com/team/train:1.4"}) {
    Post(Body(absl::StrCat(R"({"image": ")", image, R"("})")), 201);
  }
  EXPECT_EQ(resolver_.calls(), 2);
  // Another host, another port of a listed host, a port a listed host was
  // given without.
  for (const std::string registry : {"127.0.0.1:22", "localhost:5001",
                                     "localhost", "registry.example.com:443"}) {
    nlohmann::json e = Post(
        Body(absl::StrCat(R"({"image": ")", registry, R"(/team/train:1.4"})")),
        400);
    EXPECT_EQ(e["error"]["field"], "container.image") << registry;
    EXPECT_EQ(e["error"]["message"].get<std::string>(),
              absl::StrCat("container.image: registry '", registry,
                           "' is not one this cluster takes images from "
                           "(containers.allowed_registries: localhost:5000, "
                           "registry.example.com)"));
  }
  EXPECT_EQ(resolver_.calls(), 2);
  EXPECT_EQ(JobCount(), 2u);
}

TEST(ContainerController, AnUnresolvedSpecIsRefused) {
  MemoryStateStore store;
  auto c = Controller::Create(ClusterWithMounts(), &store, ControllerOptions{},
                              T(0));
  ASSERT_TRUE(c.ok());
  absl::StatusOr<nlohmann::json> j = (*c)->Submit(
      Spec("name: t\ncommand: [x]\ncontainer: {image: localhost:5000/a:1}\n"),
      "alice", T(1));
  EXPECT_EQ(j.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(store.Get(JobKey(1)).ok());
}

TEST(ContainerController, TheLaunchBodyPinsTheDigest) {
  MemoryStateStore store;
  auto c = Controller::Create(ClusterWithMounts(), &store, ControllerOptions{},
                              T(0));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(
      (*c)->Register(testing::EmulatedNode("h200-0", "127.0.0.2:7100"), T(1))
          .ok());
  JobSpec spec = Spec(
      "name: t\ncommand: [python, t.py]\n"
      "container: {image: 'localhost:5000/team/train:1.4', mounts: "
      "['/data:/data:ro', '/scratch/a:/s'], workdir: /w, writable: true, "
      "shm_size: 2Gi}\n");
  ASSERT_TRUE(ResolveContainer(*(*c)->cluster(), nullptr, &spec).code() ==
              absl::StatusCode::kFailedPrecondition);
  spec.container->image_digest = kDigest;
  ASSERT_TRUE((*c)->Submit(spec, "alice", T(2)).ok());
  (*c)->Tick(T(3));
  std::vector<AgentAction> actions = (*c)->TakeActions();
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].body["argv"], nlohmann::json({"python", "t.py"}));
  EXPECT_EQ(actions[0].body["container"],
            nlohmann::json::parse(absl::StrCat(
                R"({"image": "localhost:5000/team/train@)", kDigest, R"(",
              "image_ref": "localhost:5000/team/train:1.4",
              "mounts": [{"source": "/data", "destination": "/data",
                          "readonly": true},
                         {"source": "/scratch/a", "destination": "/s",
                          "readonly": false}],
              "workdir": "/w", "entrypoint": [], "writable": true,
              "shm_size": 2147483648})")));
}

TEST(ContainerLaunchJson, Entrypoints) {
  ContainerSpec c;
  c.image = "localhost:5000/a:1";
  c.image_digest = kDigest;
  EXPECT_EQ(ContainerLaunchJson(c)["entrypoint"], nlohmann::json::array());
  EXPECT_FALSE(ContainerLaunchJson(c).contains("no_entrypoint"));
  c.entrypoint = std::vector<std::string>{};
  EXPECT_EQ(ContainerLaunchJson(c)["entrypoint"], nlohmann::json::array());
  EXPECT_EQ(ContainerLaunchJson(c)["no_entrypoint"], true);
  c.entrypoint = std::vector<std::string>{"/init", "--"};
  EXPECT_EQ(ContainerLaunchJson(c)["entrypoint"],
            nlohmann::json({"/init", "--"}));
  EXPECT_EQ(ContainerLaunchJson(c)["image"],
            absl::StrCat("localhost:5000/a@", kDigest));
}

TEST(RegistryImageResolver, InsecureRegistries) {
  RegistryImageResolverOptions o;
  o.insecure_registries = {"localhost:5000", "127.0.0.1", "[::1]:5001"};
  RegistryImageResolver r(o);
  EXPECT_TRUE(r.IsInsecure("localhost:5000"));
  EXPECT_TRUE(r.IsInsecure("LOCALHOST:5000"));
  EXPECT_FALSE(r.IsInsecure("localhost:5001"));
  EXPECT_FALSE(r.IsInsecure("localhost"));
  EXPECT_TRUE(r.IsInsecure("127.0.0.1:5000"));
  EXPECT_TRUE(r.IsInsecure("127.0.0.1"));
  EXPECT_TRUE(r.IsInsecure("[::1]:5001"));
  EXPECT_FALSE(r.IsInsecure("[::1]:5000"));
  EXPECT_FALSE(r.IsInsecure("registry.example.com"));
  for (const char* ok :
       {"localhost:5000", "127.0.0.1", "reg.example.com", "[::1]:5000"}) {
    EXPECT_TRUE(CheckInsecureRegistry(ok).ok()) << ok;
  }
  for (const char* bad :
       {"", "http://localhost:5000", "localhost:5000/x", "a b", "nohost"}) {
    EXPECT_FALSE(CheckInsecureRegistry(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace loom
