// RegistryClient against in-process registries that want credentials:
// Basic, and Bearer with a token endpoint of their own (the Distribution
// token flow), the token cache, and where credentials are not sent.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "loom/image/registry_client.h"
#include "loom/image/registry_token.h"
#include "loom/image/sha256.h"

namespace loom::image {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// An httplib server on `host`, listening on a thread of its own.
class TestHttpServer {
 public:
  explicit TestHttpServer(const std::string& host) : host_(host) {}
  ~TestHttpServer() { Stop(); }
  void Start() {
    port_ = server_.bind_to_any_port(host_);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::yield();
  }
  void Stop() {
    if (!thread_.joinable()) return;
    server_.stop();
    thread_.join();
  }
  httplib::Server& server() { return server_; }
  std::string authority() const { return absl::StrCat(host_, ":", port_); }

 private:
  const std::string host_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

enum class AuthMode { kBasic, kBearer };

// A registry that wants `mode`'s authorization for everything, and a second
// server (`other_`, on 127.0.0.1 or 127.0.0.2) that is its token realm and
// the store it redirects the blob "redirected" to.
class ImageRegistryAuthTest : public ::testing::Test {
 protected:
  void Start(AuthMode mode, const std::string& other_host = "127.0.0.1") {
    mode_ = mode;
    other_ = std::make_unique<TestHttpServer>(other_host);
    layers_ = {"first layer", "second layer", "redirected layer"};
    json layers = json::array();
    for (const std::string& l : layers_) {
      layers.push_back({{"mediaType", "application/vnd.oci.image.layer.v1.tar"},
                        {"digest", Sha256::Of(l)},
                        {"size", l.size()}});
    }
    manifest_ = json{
        {"schemaVersion", 2},
        {"mediaType", kOciManifest},
        {"config",
         {{"mediaType", "application/vnd.oci.image.config.v1+json"},
          {"digest", Sha256::Of("{}")},
          {"size", 2}}},
        {"layers",
         layers}}.dump();
    httplib::Server& r = registry_.server();
    r.Get("/v2/", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res, "")) return;
      res.set_content("{}", "application/json");
    });
    const auto manifest = [this](const httplib::Request& req,
                                 httplib::Response& res) {
      if (!Authorized(req, res, req.matches[1])) return;
      res.set_header("Docker-Content-Digest", Sha256::Of(manifest_));
      res.set_content(manifest_, kOciManifest.data());
    };
    r.Get(R"(/v2/(.+)/manifests/(.+))", manifest);
    r.Get(R"(/v2/(.+)/blobs/(.+))",
          [this](const httplib::Request& req, httplib::Response& res) {
            if (!Authorized(req, res, req.matches[1])) return;
            for (const std::string& l : layers_) {
              if (req.matches[2] != Sha256::Of(l)) continue;
              if (l == "redirected layer") {
                res.status = 307;
                res.set_header("Location",
                               absl::StrCat("http://", other_->authority(),
                                            "/store/", Sha256::Of(l)));
                return;
              }
              res.set_content(l, "application/octet-stream");
              return;
            }
            res.status = 404;
          });
    registry_.Start();

    httplib::Server& o = other_->server();
    o.Get(
        "/token", [this](const httplib::Request& req, httplib::Response& res) {
          Token(req, res, req.get_header_value("Authorization") == GoodBasic());
        });
    o.Post("/token",
           [this](const httplib::Request& req, httplib::Response& res) {
             Token(req, res,
                   req.get_param_value("grant_type") == "refresh_token" &&
                       req.get_param_value("refresh_token") == "refresh-1" &&
                       req.get_header_value("Authorization").empty());
           });
    o.Get("/store/(.+)",
          [this](const httplib::Request& req, httplib::Response& res) {
            absl::MutexLock lock(&mu_);
            store_authorization_ = req.get_header_value("Authorization");
            res.set_content(layers_[2], "application/octet-stream");
          });
    other_->Start();
  }

  static std::string GoodBasic() {
    return "Basic " + absl::Base64Escape("alice:s3cret");
  }

  // Answers 401 with the mode's challenge unless `req` is authorized.
  bool Authorized(const httplib::Request& req, httplib::Response& res,
                  const std::string& repository) {
    const std::string got = req.get_header_value("Authorization");
    absl::MutexLock lock(&mu_);
    if (mode_ == AuthMode::kBasic && got == GoodBasic()) return true;
    if (mode_ == AuthMode::kBearer && got.rfind("Bearer ", 0) == 0 &&
        valid_tokens_.contains(got.substr(7))) {
      return true;
    }
    ++challenges_;
    res.status = 401;
    res.set_content(
        R"({"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]})",
        "application/json");
    if (mode_ == AuthMode::kBasic) {
      res.set_header("WWW-Authenticate", R"(Basic realm="test registry")");
      return false;
    }
    std::string challenge =
        absl::StrCat(R"(Bearer realm="http://)", other_->authority(),
                     R"(/token",service="test registry")");
    if (!repository.empty()) {
      absl::StrAppend(&challenge, R"(,scope="repository:)", repository,
                      R"(:pull")");
    }
    res.set_header("WWW-Authenticate", challenge);
    return false;
  }

  // The token endpoint: a token the registry accepts for `good`
  // credentials, an anonymous one it does not accept for none, 401 for
  // wrong ones.
  void Token(const httplib::Request& req, httplib::Response& res, bool good) {
    absl::MutexLock lock(&mu_);
    ++token_requests_;
    token_authorization_ = req.get_header_value("Authorization");
    token_service_ = req.get_param_value("service");
    token_scope_ = req.get_param_value("scope");
    if (!good && !token_authorization_.empty()) {
      res.status = 401;
      res.set_content(R"({"errors":[{"code":"UNAUTHORIZED"}]})",
                      "application/json");
      return;
    }
    std::string token = absl::StrCat(good ? "tok-" : "anon-", token_requests_);
    if (good) valid_tokens_.insert(token);
    json answer = {{use_access_token_ ? "access_token" : "token", token},
                   {"expires_in", 60}};
    res.set_content(answer.dump(), "application/json");
  }

  RegistryClient Client(std::optional<RegistryCredential> credential,
                        RegistryTokenCache* tokens = nullptr) const {
    RegistryOptions o;
    o.plain_http = true;
    o.connect_timeout = absl::Seconds(2);
    o.io_timeout = absl::Seconds(2);
    o.credential = std::move(credential);
    o.tokens = tokens;
    return RegistryClient(registry_.authority(), o);
  }
  static RegistryCredential Alice(const std::string& password = "s3cret") {
    return {"alice", password, "", "auth.json auths[\"registry\"]"};
  }
  ImageRef Ref() const { return {registry_.authority(), "team/x", "1", ""}; }
  Descriptor Layer(int i) const {
    Descriptor d;
    d.media_type = "application/vnd.oci.image.layer.v1.tar";
    d.digest = Sha256::Of(layers_[i]);
    d.size = static_cast<int64_t>(layers_[i].size());
    return d;
  }
  // Pulls the manifest and every layer, each with a client of its own (as
  // RegistryImageSource does) that share `tokens`.
  absl::Status Pull(const std::optional<RegistryCredential>& credential,
                    RegistryTokenCache* tokens) {
    absl::StatusOr<std::string> digest =
        Client(credential, tokens).Resolve(Ref());
    if (!digest.ok()) return digest.status();
    absl::StatusOr<Manifest> m =
        Client(credential, tokens)
            .FetchImageManifest(Ref().WithDigest(*digest));
    if (!m.ok()) return m.status();
    for (int i = 0; i < static_cast<int>(layers_.size()); ++i) {
      const std::string path = dir_ + "/layer" + std::to_string(i);
      if (absl::Status s = Client(credential, tokens)
                               .FetchBlob("team/x", m->layers[i], path, {});
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  void SetUp() override {
    char tmpl[] = "/tmp/registry_client_auth_test.XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override {
    registry_.Stop();
    if (other_) other_->Stop();
    std::filesystem::remove_all(dir_);
  }

  int token_requests() {
    absl::MutexLock lock(&mu_);
    return token_requests_;
  }
  int challenges() {
    absl::MutexLock lock(&mu_);
    return challenges_;
  }

  TestHttpServer registry_{"127.0.0.1"};
  std::unique_ptr<TestHttpServer> other_;
  AuthMode mode_ = AuthMode::kBasic;
  std::vector<std::string> layers_;
  std::string manifest_;
  std::string dir_;
  bool use_access_token_ = false;

  absl::Mutex mu_;
  std::set<std::string> valid_tokens_;
  int token_requests_ = 0;
  int challenges_ = 0;
  std::string token_authorization_, token_service_, token_scope_;
  std::string store_authorization_ = "(not asked)";
};

TEST_F(ImageRegistryAuthTest, BasicWithTheRightCredentialsPulls) {
  Start(AuthMode::kBasic);
  RegistryTokenCache tokens;
  EXPECT_TRUE(Client(Alice(), &tokens).Ping().ok());
  absl::Status s = Pull(Alice(), &tokens);
  ASSERT_TRUE(s.ok()) << s;
  // The Basic value is kept for the repository: one challenge for /v2/,
  // one for team/x, and none for the manifest and blobs after it.
  EXPECT_EQ(challenges(), 2);
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(store_authorization_, "");  // the redirect's store got none
}

TEST_F(ImageRegistryAuthTest, BasicWithWrongCredentialsIsRefused) {
  Start(AuthMode::kBasic);
  absl::StatusOr<std::string> d = Client(Alice("wrong")).Resolve(Ref());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(d.status().message(),
            absl::StrCat("registry ", registry_.authority(),
                         " refused the credentials for team/x (auth.json "
                         "auths[\"registry\"])"));
  EXPECT_THAT(d.status().message(), Not(HasSubstr("wrong")));
}

TEST_F(ImageRegistryAuthTest, WithoutCredentialsNeedsThem) {
  Start(AuthMode::kBasic);
  absl::StatusOr<std::string> d = Client(std::nullopt).Resolve(Ref());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(d.status().message(),
            absl::StrCat("registry ", registry_.authority(),
                         " needs credentials for team/x: none configured for ",
                         registry_.authority()));
  absl::Status blob =
      Client(std::nullopt).FetchBlob("team/x", Layer(0), dir_ + "/b", {});
  EXPECT_EQ(blob.code(), absl::StatusCode::kUnauthenticated) << blob;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/b"));
}

TEST_F(ImageRegistryAuthTest, BearerTokenIsFetchedOnceForSeveralBlobs) {
  Start(AuthMode::kBearer);
  RegistryTokenCache tokens;
  absl::Status s = Pull(Alice(), &tokens);
  ASSERT_TRUE(s.ok()) << s;
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(token_requests_, 1);  // a resolve, a manifest, three blobs
  EXPECT_EQ(challenges_, 1);      // only the first request went without
  EXPECT_EQ(token_authorization_, GoodBasic());
  EXPECT_EQ(token_service_, "test registry");
  EXPECT_EQ(token_scope_, "repository:team/x:pull");
  // The blob store the registry redirected to got no Authorization.
  EXPECT_EQ(store_authorization_, "");
}

TEST_F(ImageRegistryAuthTest, AnAccessTokenFieldIsATokenToo) {
  use_access_token_ = true;
  Start(AuthMode::kBearer);
  absl::StatusOr<std::string> d = Client(Alice()).Resolve(Ref());
  EXPECT_TRUE(d.ok()) << d.status();
}

TEST_F(ImageRegistryAuthTest, AnIdentityTokenIsTradedForAnAccessToken) {
  Start(AuthMode::kBearer);
  RegistryCredential c{"carol", "", "refresh-1", "auth.json auths[\"r\"]"};
  absl::StatusOr<std::string> d = Client(c).Resolve(Ref());
  ASSERT_TRUE(d.ok()) << d.status();
  c.identity_token = "refresh-2";
  d = Client(c).Resolve(Ref());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(d.status().message(), HasSubstr("refused the credentials"));
}

TEST_F(ImageRegistryAuthTest, ATokenIsFetchedAgainWhenItExpires) {
  Start(AuthMode::kBearer);
  absl::Time now = absl::FromUnixSeconds(1000000);
  RegistryTokenCache tokens([&now] { return now; });
  ASSERT_TRUE(Client(Alice(), &tokens).Resolve(Ref()).ok());
  now += absl::Seconds(45);  // expires_in 60
  ASSERT_TRUE(Client(Alice(), &tokens).Resolve(Ref()).ok());
  EXPECT_EQ(token_requests(), 1);
  now += absl::Seconds(10);  // within 10 s of its end: not offered
  ASSERT_TRUE(Client(Alice(), &tokens).Resolve(Ref()).ok());
  EXPECT_EQ(token_requests(), 2);
  // A token the registry stops accepting is replaced, without an error.
  {
    absl::MutexLock lock(&mu_);
    valid_tokens_.clear();
  }
  ASSERT_TRUE(Client(Alice(), &tokens).Resolve(Ref()).ok());
  EXPECT_EQ(token_requests(), 3);
}

TEST_F(ImageRegistryAuthTest, BearerWithWrongCredentialsIsRefused) {
  Start(AuthMode::kBearer);
  absl::StatusOr<std::string> d = Client(Alice("wrong")).Resolve(Ref());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(d.status().message(),
              HasSubstr(absl::StrCat("registry ", registry_.authority(),
                                     " refused the credentials for team/x")));
  EXPECT_THAT(d.status().message(), HasSubstr("answered 401 UNAUTHORIZED"));
  EXPECT_THAT(d.status().message(), Not(HasSubstr("wrong")));
}

TEST_F(ImageRegistryAuthTest, BearerWithoutCredentialsNeedsThem) {
  Start(AuthMode::kBearer);
  // The realm hands out an anonymous token, which the registry refuses.
  absl::StatusOr<std::string> d = Client(std::nullopt).Resolve(Ref());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(d.status().message(),
              HasSubstr(absl::StrCat("needs credentials for team/x: none "
                                     "configured for ",
                                     registry_.authority())));
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(token_requests_, 1);
  EXPECT_EQ(token_authorization_, "");
}

TEST_F(ImageRegistryAuthTest, ARealmOnAnotherHostOverHttpGetsNoCredentials) {
  Start(AuthMode::kBearer, "127.0.0.2");
  absl::StatusOr<std::string> d = Client(Alice()).Resolve(Ref());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(d.status().message(), HasSubstr("loom did not send them"));
  EXPECT_THAT(
      d.status().message(),
      HasSubstr(absl::StrCat("its token realm http://", other_->authority(),
                             " is on another host than the registry "
                             "and not https")));
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(token_requests_, 1);  // asked anonymously
  EXPECT_EQ(token_authorization_, "");
}

// Realms the client refuses before asking them anything.
TEST(ImageRegistryChallenge, RealmsThatAreRefused) {
  RegistryTokenCache tokens;
  RegistryCredential alice{"alice", "s3cret", "", "f"};
  RegistryChallengeContext c;
  c.registry = "registry.example.com";
  c.credential = &alice;
  c.tokens = &tokens;
  c.repository = "team/x";
  c.connect_timeout = absl::Milliseconds(100);
  const auto answer = [&](const std::string& realm) {
    return AnswerRegistryChallenge(
        c, {absl::StrCat("Bearer realm=\"", realm, "\",scope=\"x\"")});
  };
  c.plain_http = false;  // an https registry
  EXPECT_THAT(answer("http://registry.example.com/token").status().message(),
              HasSubstr("(https) names a token realm over plain http"));
  EXPECT_THAT(answer("ftp://registry.example.com/token").status().message(),
              HasSubstr("is not an http:// or https:// URL"));
  EXPECT_THAT(answer("https://u:p@auth.example.com/").status().message(),
              HasSubstr("user info"));
  EXPECT_THAT(
      AnswerRegistryChallenge(c, {"Bearer service=\"x\""}).status().message(),
      HasSubstr("names no realm"));
  EXPECT_THAT(AnswerRegistryChallenge(c, {"Negotiate abc"}).status().message(),
              HasSubstr("wants negotiate authentication"));
  EXPECT_THAT(AnswerRegistryChallenge(c, {}).status().message(),
              HasSubstr("without a WWW-Authenticate challenge"));
  c.plain_http = true;  // an insecure registry: http realms on its host or
                        // loopback only
  EXPECT_THAT(answer("http://auth.example.com/token").status().message(),
              HasSubstr("over plain http on another host"));
}

TEST(ImageRegistryChallenge, ParsesChallenges) {
  std::vector<AuthChallenge> c = ParseAuthChallenges(
      R"(Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:a/b:pull,push" , Basic realm="say \"hi\"", Other)");
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].scheme, "bearer");
  EXPECT_EQ(c[0].params["realm"], "https://auth.example.com/token");
  EXPECT_EQ(c[0].params["service"], "registry.example.com");
  EXPECT_EQ(c[0].params["scope"], "repository:a/b:pull,push");
  EXPECT_EQ(c[1].scheme, "basic");
  EXPECT_EQ(c[1].params["realm"], R"(say "hi")");
  EXPECT_EQ(c[2].scheme, "other");
  EXPECT_TRUE(c[2].params.empty());
  c = ParseAuthChallenges("BASIC Realm=plain");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].params["realm"], "plain");
  EXPECT_TRUE(ParseAuthChallenges("").empty());
}

TEST(ImageRegistryChallenge, HttpUrlsAndLoopback) {
  absl::StatusOr<HttpUrl> u = ParseHttpUrl("HTTPS://Auth.Example.com:8443");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->Origin(), "https://auth.example.com:8443");
  EXPECT_EQ(u->target, "/");
  u = ParseHttpUrl("http://[::1]:5000/token?a=b#frag");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(AuthorityHost(u->authority), "[::1]");
  EXPECT_EQ(u->target, "/token?a=b");
  EXPECT_FALSE(ParseHttpUrl("http:///token").ok());
  EXPECT_FALSE(ParseHttpUrl("http://a b/").ok());
  for (const char* host : {"localhost", "127.0.0.1", "127.1.2.3", "[::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"127.0.0.1.example.com", "128.0.0.1", "127.0.0",
                           "[::2]", "example.com"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(ImageRegistryTokenCache, KeepsValuesUntilTheyExpire) {
  absl::Time now = absl::FromUnixSeconds(100);
  RegistryTokenCache cache([&now] { return now; });
  cache.Put("R:1", "repository:a:pull", "Bearer t", now + absl::Seconds(5));
  EXPECT_EQ(cache.Find("r:1", "repository:a:pull"), "Bearer t");
  EXPECT_EQ(cache.Find("R:1", "repository:b:pull"), std::nullopt);
  cache.Forget("R:1", "repository:a:pull", "Bearer other");
  EXPECT_EQ(cache.Find("R:1", "repository:a:pull"), "Bearer t");
  now += absl::Seconds(5);
  EXPECT_EQ(cache.Find("R:1", "repository:a:pull"), std::nullopt);
  cache.Put("R:1", "s", "Basic x", absl::InfiniteFuture());
  cache.Forget("R:1", "s", "Basic x");
  EXPECT_EQ(cache.Find("R:1", "s"), std::nullopt);
  // Bounded: the oldest keys do not pile up past kMaxEntries.
  for (size_t i = 0; i <= RegistryTokenCache::kMaxEntries; ++i) {
    cache.Put("R:1", absl::StrCat("scope", i), "Bearer t",
              absl::InfiniteFuture());
  }
  EXPECT_EQ(cache.Find("R:1", "scope0"), std::nullopt);
  EXPECT_EQ(
      cache.Find("R:1", absl::StrCat("scope", RegistryTokenCache::kMaxEntries)),
      "Bearer t");
}

}  // namespace
}  // namespace loom::image
