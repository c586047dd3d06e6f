// RegistryImageResolver with the server's registry credentials
// (`--registry-auth`) against an in-process registry that wants a Bearer
// token from its own token endpoint; and what a submission is answered when
// the registry wants credentials the server has not, or refuses them.

#include "loom/server/image_resolver.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/common/refusing_port_test_util.h"
#include "loom/core/job_spec.h"
#include "loom/image/sha256.h"
#include "loom/sched/test_util.h"
#include "loom/server/container_check.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kResolverTestManifest[] =
    R"({"schemaVersion": 2, "layers": []})";

class RegistryImageResolverAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Get(
        R"(/v2/(.+)/manifests/(.+))",
        [this](const httplib::Request& req, httplib::Response& res) {
          const std::string got = req.get_header_value("Authorization");
          absl::MutexLock lock(&mu_);
          if (got != "Bearer tok-good") {
            res.status = 401;
            res.set_header(
                "WWW-Authenticate",
                absl::StrCat(R"(Bearer realm="http://127.0.0.1:)", port_,
                             R"(/token",service="reg",scope="repository:)",
                             std::string(req.matches[1]), R"(:pull")"));
            return;
          }
          res.set_header("Docker-Content-Digest",
                         image::Sha256::Of(kResolverTestManifest));
          res.set_content(kResolverTestManifest,
                          "application/vnd.oci.image.manifest.v1+json");
        });
    server_.Get("/token", [this](const httplib::Request& req,
                                 httplib::Response& res) {
      absl::MutexLock lock(&mu_);
      ++token_requests_;
      const std::string got = req.get_header_value("Authorization");
      if (got == "Basic " + absl::Base64Escape("ci:s3cret")) {
        res.set_content(R"({"token": "tok-good", "expires_in": 300})",
                        "application/json");
      } else if (got.empty()) {
        res.set_content(R"({"token": "tok-anonymous"})", "application/json");
      } else {
        res.status = 401;
      }
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::yield();
  }
  void TearDown() override {
    server_.stop();
    thread_.join();
  }

  std::string Registry() const { return absl::StrCat("127.0.0.1:", port_); }
  image::ImageRef Ref() const { return {Registry(), "team/train", "1.4", ""}; }

  // A resolver with these credentials for the test's registry ("": none).
  std::unique_ptr<RegistryImageResolver> Resolver(const std::string& password) {
    RegistryImageResolverOptions o;
    o.insecure_registries = {"127.0.0.1"};
    o.connect_timeout = absl::Seconds(2);
    o.io_timeout = absl::Seconds(2);
    if (!password.empty()) {
      absl::StatusOr<image::RegistryCredentials> c =
          image::RegistryCredentials::Parse(
              absl::StrCat(R"({"auths": {")", Registry(), R"(": {"auth": ")",
                           absl::Base64Escape("ci:" + password), R"("}}})"),
              "/etc/loom/registry-auth.json");
      EXPECT_TRUE(c.ok()) << c.status();
      o.credentials = *std::move(c);
    }
    return std::make_unique<RegistryImageResolver>(o);
  }

  // What a submission of the test's image is answered by `resolver`.
  absl::Status Submit(ImageResolver* resolver) {
    JobSpec spec;
    spec.name = "train";
    spec.command = {"python", "t.py"};
    ContainerSpec c;
    c.image = Ref().ToString();
    spec.container = c;
    return ResolveContainer(testing::MakeCluster({{1, 0}}, 1, 8), resolver,
                            &spec);
  }

  int token_requests() {
    absl::MutexLock lock(&mu_);
    return token_requests_;
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  absl::Mutex mu_;
  int token_requests_ = 0;
};

TEST_F(RegistryImageResolverAuthTest, ResolvesWithTheServersCredentials) {
  std::unique_ptr<RegistryImageResolver> r = Resolver("s3cret");
  for (int i = 0; i < 3; ++i) {  // three submissions
    absl::StatusOr<std::string> d = r->Resolve(Ref());
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, image::Sha256::Of(kResolverTestManifest));
  }
  // The token is kept for the next submissions until it expires.
  EXPECT_EQ(token_requests(), 1);
  EXPECT_TRUE(Submit(r.get()).ok());
  EXPECT_EQ(token_requests(), 1);
}

TEST_F(RegistryImageResolverAuthTest, WithoutCredentialsTheSubmitIs400) {
  std::unique_ptr<RegistryImageResolver> r = Resolver("");
  absl::StatusOr<std::string> d = r->Resolve(Ref());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnauthenticated);
  absl::Status s = Submit(r.get());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);  // 400
  EXPECT_EQ(s.message(),
            absl::StrCat("container.image: cannot read '", Ref().ToString(),
                         "' from its registry: registry ", Registry(),
                         " needs credentials for team/train: none configured "
                         "for ",
                         Registry()));
}

TEST_F(RegistryImageResolverAuthTest, RefusedCredentialsMakeA400) {
  std::unique_ptr<RegistryImageResolver> r = Resolver("wrong-pw");
  absl::Status s = Submit(r.get());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);  // 400, not 503
  const std::string message(s.message());
  EXPECT_THAT(message,
              HasSubstr(absl::StrCat("registry ", Registry(),
                                     " refused the credentials for team/train "
                                     "(/etc/loom/registry-auth.json auths[\"",
                                     Registry(), "\"])")));
  EXPECT_THAT(message, Not(HasSubstr("wrong-pw")));
  EXPECT_THAT(message, Not(HasSubstr(absl::Base64Escape("ci:wrong-pw"))));
}

// A loopback listener that accepts connections (the kernel does, from its
// backlog) and never answers: a port that is open but not a registry.
class SilentPort {
 public:
  SilentPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ >= 0 &&
        ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::listen(fd_, 16) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~SilentPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Whatever keeps a registry from answering (a closed port, an open one that
// says nothing, one that answers 503), the user is told the same thing; the
// operator's log has what happened.
TEST(RegistryImageResolver, EveryUnreachableRegistryGetsTheSameText) {
  loom::testing::RefusingPort refusing;
  SilentPort silent;
  httplib::Server failing;
  failing.Get(".*", [](const httplib::Request&, httplib::Response& res) {
    res.status = 503;
  });
  const int failing_port = failing.bind_to_any_port("127.0.0.1");
  std::thread serve([&] { failing.listen_after_bind(); });
  while (!failing.is_running()) std::this_thread::yield();
  ASSERT_GT(refusing.port(), 0);
  ASSERT_GT(silent.port(), 0);

  std::vector<std::string> logged;
  RegistryImageResolverOptions o;
  o.insecure_registries = {"127.0.0.1"};
  o.connect_timeout = absl::Milliseconds(500);
  o.io_timeout = absl::Milliseconds(300);
  o.log = [&](const std::string& line) { logged.push_back(line); };
  RegistryImageResolver resolver(o);
  std::vector<std::string> told;
  for (int port : {refusing.port(), silent.port(), failing_port}) {
    const std::string registry = absl::StrCat("127.0.0.1:", port);
    JobSpec spec;
    spec.name = "train";
    spec.command = {"python", "t.py"};
    spec.container = ContainerSpec{};
    spec.container->image = absl::StrCat(registry, "/team/train:1.4");
    absl::Status s = ResolveContainer(testing::MakeCluster({{1, 0}}, 1, 8),
                                      &resolver, &spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    told.push_back(absl::StrReplaceAll(s.message(), {{registry, "REGISTRY"}}));
  }
  failing.stop();
  serve.join();
  ASSERT_EQ(told.size(), 3u);
  EXPECT_EQ(told[0],
            "container.image: the registry REGISTRY cannot be reached, so "
            "'REGISTRY/team/train:1.4' cannot be resolved to a digest (nothing "
            "was stored; retry later)");
  EXPECT_EQ(told[1], told[0]);
  EXPECT_EQ(told[2], told[0]);
  // The log tells them apart.
  ASSERT_EQ(logged.size(), 3u);
  EXPECT_NE(logged[0], logged[1]);
  EXPECT_THAT(logged[2], HasSubstr("503"));
  for (const std::string& line : logged) {
    EXPECT_THAT(line, HasSubstr("cannot resolve 127.0.0.1:"));
  }
}

}  // namespace
}  // namespace loom
