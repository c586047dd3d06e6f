#include "loom/image/image_ref.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace loom::image {
namespace {

using ::testing::HasSubstr;

const std::string kHex(64, 'a');
const std::string kDigest = "sha256:" + kHex;

TEST(ImageRefTest, ParsesRegistryPortPathAndTag) {
  absl::StatusOr<ImageRef> r = ParseImageRef("host:5000/team/train:1.4");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->registry, "host:5000");
  EXPECT_EQ(r->repository, "team/train");
  EXPECT_EQ(r->tag, "1.4");
  EXPECT_EQ(r->digest, "");
  EXPECT_EQ(r->ManifestReference(), "1.4");
  EXPECT_EQ(r->ToString(), "host:5000/team/train:1.4");
  EXPECT_EQ(r->Name(), "host:5000/team/train");
}

TEST(ImageRefTest, ParsesDigestWithAndWithoutTag) {
  absl::StatusOr<ImageRef> r = ParseImageRef("reg.example/a/b@" + kDigest);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tag, "");
  EXPECT_EQ(r->digest, kDigest);
  EXPECT_EQ(r->ManifestReference(), kDigest);
  EXPECT_EQ(r->ToString(), "reg.example/a/b@" + kDigest);

  r = ParseImageRef("reg.example:443/a:v2@" + kDigest);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->registry, "reg.example:443");
  EXPECT_EQ(r->tag, "v2");
  EXPECT_EQ(r->digest, kDigest);
  EXPECT_EQ(r->ToString(), "reg.example:443/a:v2@" + kDigest);
}

TEST(ImageRefTest, NoTagMeansLatest) {
  absl::StatusOr<ImageRef> r = ParseImageRef("localhost/busybox");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->registry, "localhost");
  EXPECT_EQ(r->tag, "latest");
  EXPECT_EQ(r->ToString(), "localhost/busybox:latest");
}

TEST(ImageRefTest, GoodReferencesRoundTrip) {
  for (const std::string& text : std::vector<std::string>{
           "127.0.0.1:5000/test/busybox:1",
           "localhost:5000/x:latest",
           "nvcr.io/nvidia/pytorch:24.05-py3",
           "registry.example.com/a.b/c_d/e__f/g-h/i---j:T_a.g-1",
           "[::1]:5000/ipv6/image:1",
           "[fe80::1]/x:y",
           "my-registry.internal/x9:_tag",
           "host.example/" + std::string(10, 'a') + ":" + std::string(128, 't'),
           "host.example/a/b:c@" + kDigest,
       }) {
    absl::StatusOr<ImageRef> r = ParseImageRef(text);
    ASSERT_TRUE(r.ok()) << text << ": " << r.status();
    EXPECT_EQ(r->ToString(), text);
    absl::StatusOr<ImageRef> again = ParseImageRef(r->ToString());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *r);
  }
}

struct Bad {
  std::string text;
  std::string says;
};

TEST(ImageRefTest, BadReferencesNameThePart) {
  for (const Bad& bad : std::vector<Bad>{
           {"", "empty"},
           {"busybox", "no registry host"},
           {"busybox:1.36", "no registry host"},
           {"library/busybox:1", "no registry host"},
           {"team/train@" + kDigest, "no registry host"},
           {"host:5000/", "no repository"},
           {"host:5000", "no registry host"},
           {"host:5000/Team/train", "repository path component \"Team\""},
           {"host:5000/team//train", "repository path component \"\""},
           {"host:5000/team/-train", "repository path component \"-train\""},
           {"host:5000/team/train_", "repository path component \"train_\""},
           {"host:5000/a___b", "repository path component \"a___b\""},
           {"host:5000/a..b", "repository path component \"a..b\""},
           {"host:5000/a/b/", "repository path component \"\""},
           {"host:5000/a:", "tag \"\""},
           {"host:5000/a:.x", "tag \".x\""},
           {"host:5000/a:-x", "tag \"-x\""},
           {"host:5000/a:x y", "tag \"x y\""},
           {"host:5000/a:" + std::string(129, 't'), "tag"},
           {"host:5000/a@sha256:abc", "digest \"sha256:abc\""},
           {"host:5000/a@sha512:" + kHex, "digest"},
           {"host:5000/a@sha256:" + std::string(64, 'A'), "digest"},
           {"host:5000/a@", "digest \"\""},
           {"host:port/a", "registry host \"host:port\""},
           {"-host.example/a", "registry host \"-host.example\""},
           {"host..example/a", "registry host \"host..example\""},
           {"host.example:123456/a", "registry host"},
           {"[::1/a", "registry host"},
           {"ho_st.example/a", "registry host"},
           {"host.example/" + std::string(250, 'a'), "longer than 255"},
       }) {
    absl::StatusOr<ImageRef> r = ParseImageRef(bad.text);
    ASSERT_FALSE(r.ok()) << bad.text << " parsed as " << r->ToString();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(bad.says)) << bad.text;
  }
}

TEST(ImageRefTest, WithDigestPinsAndKeepsTheTag) {
  absl::StatusOr<ImageRef> r = ParseImageRef("host:5000/team/train:1.4");
  ASSERT_TRUE(r.ok());
  const ImageRef pinned = r->WithDigest(kDigest);
  EXPECT_EQ(pinned.ToString(), "host:5000/team/train:1.4@" + kDigest);
  EXPECT_EQ(pinned.ManifestReference(), kDigest);
  EXPECT_EQ(r->digest, "");
}

TEST(ImageRefTest, Sha256Digests) {
  EXPECT_TRUE(IsSha256Digest(kDigest));
  EXPECT_EQ(DigestHex(kDigest), kHex);
  EXPECT_FALSE(IsSha256Digest("sha256:" + std::string(63, 'a')));
  EXPECT_FALSE(IsSha256Digest("sha256:" + std::string(65, 'a')));
  EXPECT_FALSE(IsSha256Digest("sha256:" + std::string(63, 'a') + "g"));
  EXPECT_FALSE(IsSha256Digest(kHex));
}

}  // namespace
}  // namespace loom::image
