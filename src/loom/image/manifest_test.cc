#include "loom/image/manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "loom/image/sha256.h"

namespace loom::image {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string D(char c) { return "sha256:" + std::string(64, c); }

json Layer(char c, int64_t size,
           const char* type = "application/vnd.oci.image.layer.v1.tar+gzip") {
  return {{"mediaType", type}, {"digest", D(c)}, {"size", size}};
}

TEST(ImageManifestTest, ParsesOciManifest) {
  const json m = {{"schemaVersion", 2},
                  {"mediaType", kOciManifest},
                  {"config",
                   {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                    {"digest", D('c')},
                    {"size", 10}}},
                  {"layers", {Layer('a', 100), Layer('b', 23)}}};
  absl::StatusOr<Manifest> p = ParseManifest(m.dump(), "", D('f'));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->digest, D('f'));
  EXPECT_EQ(p->config.digest, D('c'));
  ASSERT_EQ(p->layers.size(), 2u);
  EXPECT_EQ(p->layers[0].digest, D('a'));
  EXPECT_EQ(p->layers[1].size, 23);
  EXPECT_EQ(p->LayerBytes(), 123);
}

TEST(ImageManifestTest, MediaTypeFromContentTypeWhenTheBodyHasNone) {
  const json m = {
      {"schemaVersion", 2},
      {"config", {{"digest", D('c')}, {"size", 1}}},
      {"layers",
       {Layer('a', 1, "application/vnd.docker.image.rootfs.diff.tar.gzip")}}};
  absl::StatusOr<Manifest> p = ParseManifest(
      m.dump(), std::string(kDockerManifest) + "; charset=utf-8", D('f'));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->media_type, kDockerManifest);
}

TEST(ImageManifestTest, RejectsWhatCannotBeRun) {
  const json config = {{"digest", D('c')}, {"size", 1}};
  struct Case {
    json body;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{{"mediaType", kOciIndex}, {"manifests", json::array()}},
            "not an OCI or Docker schema 2 image manifest"},
           {{{"mediaType", kOciManifest}, {"layers", json::array()}},
            "no config"},
           {{{"mediaType", kOciManifest}, {"config", config}}, "no layers"},
           {{{"mediaType", kOciManifest},
             {"config", config},
             {"layers",
              {{{"mediaType", "application/vnd.oci.image.layer.v1.tar"},
                {"digest", "sha256:1234"},
                {"size", 1}}}}},
            "layer 0: digest \"sha256:1234\""},
           {{{"mediaType", kOciManifest},
             {"config", config},
             {"layers",
              {Layer('a', 1,
                     "application/vnd.docker.image.rootfs.foreign."
                     "diff.tar.gzip")}}},
            "which loom does not unpack"},
           {{{"mediaType", kOciManifest},
             {"config", config},
             {"layers", {{{"digest", D('a')}, {"size", -1}}}}},
            "no size"},
       }) {
    absl::StatusOr<Manifest> p = ParseManifest(c.body.dump(), "", D('f'));
    ASSERT_FALSE(p.ok()) << c.body.dump();
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(p.status().message(), HasSubstr(c.says));
  }
  EXPECT_FALSE(ParseManifest("not json", "", D('f')).ok());
}

TEST(ImageManifestTest, PicksLinuxAmd64FromAnIndex) {
  const json index = {
      {"mediaType", kOciIndex},
      {"manifests",
       {{{"mediaType", kOciManifest},
         {"digest", D('1')},
         {"size", 5},
         {"platform",
          {{"os", "linux"}, {"architecture", "arm64"}, {"variant", "v8"}}}},
        {{"mediaType", kOciManifest},
         {"digest", D('2')},
         {"size", 6},
         {"platform", {{"os", "linux"}, {"architecture", "amd64"}}}}}}};
  absl::StatusOr<Descriptor> d = PickPlatform(index.dump(), "linux", "amd64");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->digest, D('2'));
  d = PickPlatform(index.dump(), "linux", "s390x");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.status().message(),
              HasSubstr("no linux/s390x manifest (it has: linux/arm64/v8, "
                        "linux/amd64)"));
}

TEST(ImageManifestTest, IndexTypes) {
  EXPECT_TRUE(IsIndexMediaType(kOciIndex));
  EXPECT_TRUE(IsIndexMediaType(kDockerManifestList));
  EXPECT_FALSE(IsIndexMediaType(kOciManifest));
}

TEST(ImageSha256Test, KnownDigests) {
  EXPECT_EQ(Sha256::Of(""),
            "sha256:"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 h;
  h.Update("a");
  h.Update("bc");
  EXPECT_EQ(h.Digest(), Sha256::Of("abc"));
  EXPECT_EQ(Sha256::Of("abc"),
            "sha256:"
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace loom::image
