#include "loom/image/registry_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "loom/image/sha256.h"

namespace loom::image {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A registry in the test: what the Distribution API serves, and some of the
// ways a registry goes wrong.
class ImageRegistryClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layer_ = "layer bytes";
    manifest_ =
        json{{"schemaVersion", 2},
             {"mediaType", kOciManifest},
             {"config",
              {{"mediaType", "application/vnd.oci.image.config.v1+json"},
               {"digest", Sha256::Of("{}")},
               {"size", 2}}},
             {"layers",
              {{{"mediaType", "application/vnd.oci.image.layer.v1.tar"},
                {"digest", Sha256::Of(layer_)},
                {"size", layer_.size()}}}}}
            .dump();
    index_ =
        json{{"schemaVersion", 2},
             {"mediaType", kOciIndex},
             {"manifests",
              {{{"mediaType", kOciManifest},
                {"digest", Sha256::Of(manifest_)},
                {"size", manifest_.size()},
                {"platform", {{"os", "linux"}, {"architecture", "amd64"}}}}}}}
            .dump();
    const auto manifest = [this](const httplib::Request& req,
                                 httplib::Response& res) {
      const std::string ref = req.matches[2];
      std::string body;
      std::string type(kOciManifest);
      if (ref == "1" || ref == Sha256::Of(manifest_)) body = manifest_;
      if (ref == "multi" || ref == Sha256::Of(index_)) {
        body = index_;
        type = std::string(kOciIndex);
      }
      if (ref == "nodigest" || ref == Sha256::Of("tampered")) body = manifest_;
      if (body.empty()) {
        res.status = 404;
        res.set_content(
            R"({"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]})",
            "application/json");
        return;
      }
      if (ref != "nodigest") {
        res.set_header("Docker-Content-Digest", Sha256::Of(body));
      }
      res.set_content(body, type.c_str());
    };
    server_.Get(R"(/v2/(.+)/manifests/(.+))", manifest);
    server_.Get("/v2/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{}", "application/json");
    });
    server_.Get(R"(/v2/(.+)/blobs/(.+))", [this](const httplib::Request& req,
                                                 httplib::Response& res) {
      ++blob_gets_;
      if (req.matches[1] == "locked/x") {
        res.status = 401;  // and no challenge
        return;
      }
      if (req.matches[2] != Sha256::Of(layer_)) {
        res.status = 404;
        res.set_content(
            R"({"errors":[{"code":"BLOB_UNKNOWN","message":"blob unknown to registry"}]})",
            "application/json");
        return;
      }
      res.set_content(req.matches[1] == "bad/x" ? "tampered!!!" : layer_,
                      "application/octet-stream");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::yield();
    char tmpl[] = "/tmp/registry_client_test.XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override {
    server_.stop();
    thread_.join();
    std::filesystem::remove_all(dir_);
  }

  RegistryClient Client() const {
    RegistryOptions o;
    o.plain_http = true;
    o.connect_timeout = absl::Seconds(2);
    o.io_timeout = absl::Seconds(2);
    return RegistryClient("127.0.0.1:" + std::to_string(port_), o);
  }
  ImageRef Ref(const std::string& repo, const std::string& tag) const {
    return ImageRef{"127.0.0.1:" + std::to_string(port_), repo, tag, ""};
  }
  Descriptor LayerDescriptor() const {
    Descriptor d;
    d.media_type = "application/vnd.oci.image.layer.v1.tar";
    d.digest = Sha256::Of(layer_);
    d.size = static_cast<int64_t>(layer_.size());
    return d;
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::string dir_;
  std::string layer_, manifest_, index_;
  std::atomic<int> blob_gets_{0};
};

TEST_F(ImageRegistryClientTest, ResolvesATagAndFetchesItsManifest) {
  EXPECT_TRUE(Client().Ping().ok());
  absl::StatusOr<std::string> d = Client().Resolve(Ref("team/x", "1"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, Sha256::Of(manifest_));
  absl::StatusOr<Manifest> m =
      Client().FetchImageManifest(Ref("team/x", "1").WithDigest(*d));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->digest, *d);
  ASSERT_EQ(m->layers.size(), 1u);
  EXPECT_EQ(m->layers[0].digest, Sha256::Of(layer_));
}

TEST_F(ImageRegistryClientTest, WithoutADigestHeaderHashesTheBody) {
  absl::StatusOr<std::string> d = Client().Resolve(Ref("team/x", "nodigest"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, Sha256::Of(manifest_));
}

TEST_F(ImageRegistryClientTest, AnUnknownTagIsNotFoundWithTheRegistrysCode) {
  absl::StatusOr<std::string> d = Client().Resolve(Ref("team/x", "nope"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.status().message(), HasSubstr("MANIFEST_UNKNOWN"));
  EXPECT_THAT(d.status().message(), HasSubstr("team/x:nope"));
}

TEST_F(ImageRegistryClientTest, FollowsAnIndexToLinuxAmd64) {
  absl::StatusOr<std::string> d = Client().Resolve(Ref("team/x", "multi"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, Sha256::Of(index_));
  absl::StatusOr<Manifest> m =
      Client().FetchImageManifest(Ref("team/x", "multi").WithDigest(*d));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->digest, Sha256::Of(manifest_));
}

TEST_F(ImageRegistryClientTest, ContentThatDoesNotMatchItsDigestIsDataLoss) {
  absl::StatusOr<RegistryClient::RawManifest> m =
      Client().FetchManifest("team/x", Sha256::Of("tampered"));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss) << m.status();

  const std::string path = dir_ + "/blob";
  absl::Status s = Client().FetchBlob("bad/x", LayerDescriptor(), path, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("whose sha256 is"));
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(ImageRegistryClientTest, StreamsABlobWithProgress) {
  const std::string path = dir_ + "/blob";
  int64_t last = 0;
  absl::Status s = Client().FetchBlob("team/x", LayerDescriptor(), path,
                                      [&](int64_t n) { last = n; });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(last, static_cast<int64_t>(layer_.size()));
  std::ifstream in(path);
  std::stringstream got;
  got << in.rdbuf();
  EXPECT_EQ(got.str(), layer_);

  Descriptor unknown = LayerDescriptor();
  unknown.digest = Sha256::Of("nope");
  s = Client().FetchBlob("team/x", unknown, path, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("BLOB_UNKNOWN"));

  Descriptor short_size = LayerDescriptor();
  short_size.size -= 1;
  s = Client().FetchBlob("team/x", short_size, path, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

// Registries that want credentials: registry_client_auth_test.cc.
TEST_F(ImageRegistryClientTest, A401WithoutAChallengeIsPermissionDenied) {
  absl::Status s =
      Client().FetchBlob("locked/x", LayerDescriptor(), dir_ + "/b", {});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("without a WWW-Authenticate challenge"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/b"));
}

TEST_F(ImageRegistryClientTest, ARegistryThatIsNotThereIsUnavailable) {
  server_.stop();
  thread_.join();
  thread_ = std::thread([] {});
  absl::StatusOr<std::string> d = Client().Resolve(Ref("team/x", "1"));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(d.status().message(), HasSubstr("cannot reach registry"));
}

}  // namespace
}  // namespace loom::image
