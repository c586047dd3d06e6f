#include "loom/core/dataset_spec.h"

#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/core/job_spec.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string DataSpec(std::string_view more) {
  return absl::StrCat("name: j\ncommand: [\"true\"]\n", std::string(more));
}

std::string DataSpecError(std::string_view text) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text, "spec.yaml");
  EXPECT_FALSE(spec.ok()) << "parsed unexpectedly:\n" << text;
  return spec.ok() ? "" : std::string(spec.status().message());
}

TEST(DatasetSpecTest, ParsesSourcesAndMounts) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      DataSpec("data:\n"
               "  - {source: 's3:bucket/imagenet', mount: /data/imagenet/}\n"
               "  - {source: /nfs/weights, mount: /data/w}\n"
               "  - {source: 'cold store:', mount: /x}\n"),
      "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->data,
              ElementsAre(DatasetSpec{"s3:bucket/imagenet", "/data/imagenet"},
                          DatasetSpec{"/nfs/weights", "/data/w"},
                          DatasetSpec{"cold store:", "/x"}));
}

TEST(DatasetSpecTest, CanonicalJsonOnlyWhenSet) {
  absl::StatusOr<JobSpec> plain = ParseJobSpec(DataSpec(""), "spec.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(JobSpecToJson(*plain), ::testing::Not(HasSubstr("\"data\"")));
  absl::StatusOr<JobSpec> spec =
      ParseJobSpec(DataSpec("data: [{source: 'web:sets/a', mount: /data/a}]\n"),
                   "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string json = JobSpecToJson(*spec);
  EXPECT_THAT(
      json, HasSubstr(R"("data":[{"source":"web:sets/a","mount":"/data/a"}])"));
  absl::StatusOr<JobSpec> back = ParseStoredJobSpec(json, "stored");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *spec);
}

TEST(DatasetSpecTest, NamedDatasets) {
  absl::StatusOr<JobSpec> spec =
      ParseJobSpec(DataSpec("data:\n"
                            "  - {dataset: imagenet-1k}\n"
                            "  - {dataset: w.v2, mount: /weights}\n"),
                   "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->data,
              ElementsAre(DatasetSpec{"", "/data/imagenet-1k", "imagenet-1k"},
                          DatasetSpec{"", "/weights", "w.v2"}));
  // As stored once the server set its source: both, read back the same.
  spec->data[0].source = "s3:sets/imagenet";
  const std::string json = JobSpecToJson(*spec);
  EXPECT_THAT(
      json,
      HasSubstr(
          R"({"dataset":"imagenet-1k","source":"s3:sets/imagenet","mount":"/data/imagenet-1k"})"));
  absl::StatusOr<JobSpec> back = ParseStoredJobSpec(json, "stored");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *spec);
  EXPECT_THAT(DataSpecError(DataSpec("data: [{mount: /x}]\n")),
              HasSubstr("data[0]: needs a source"));
  EXPECT_THAT(DataSpecError(DataSpec("data: [{dataset: Big Set}]\n")),
              HasSubstr("data[0].dataset: 'Big Set' is not a dataset name"));
  EXPECT_THAT(DataSpecError(DataSpec("data: [{source: 'a:b'}]\n")),
              HasSubstr("data[0].mount"));
  EXPECT_TRUE(CheckDatasetName("a").ok());
  EXPECT_FALSE(CheckDatasetName("-a").ok());
  EXPECT_FALSE(CheckDatasetName(std::string(64, 'a')).ok());
}

TEST(DatasetSpecTest, RefusesBadEntries) {
  EXPECT_THAT(DataSpecError(DataSpec("data: [{source: 'a:b', mount: data}]\n")),
              HasSubstr("data[0].mount: must be an absolute path"));
  EXPECT_THAT(DataSpecError(DataSpec("data: [{source: 'a:b', mount: /}]\n")),
              HasSubstr("data[0].mount: must not be '/'"));
  EXPECT_THAT(
      DataSpecError(DataSpec("data: [{source: 'a:b', mount: /proc/x}]\n")),
      HasSubstr("under /proc"));
  EXPECT_THAT(DataSpecError(DataSpec("data: [{source: 'a:b', mount: /d}, "
                                     "{source: 'a:c', mount: /d/}]\n")),
              HasSubstr("data[1].mount: '/d' overlaps the mount of data[0]"));
  EXPECT_THAT(DataSpecError(DataSpec("data: [{source: 'a:b', mount: /d}, "
                                     "{source: 'a:c', mount: /d/e}]\n")),
              HasSubstr("overlaps"));
  EXPECT_THAT(DataSpecError(DataSpec("data: [{mount: /d}]\n")),
              HasSubstr("data[0]: needs a source"));
  EXPECT_THAT(DataSpecError(DataSpec("data: [{source: 'a:b'}]\n")),
              HasSubstr("data[0].mount: is required"));
  EXPECT_THAT(
      DataSpecError(DataSpec("data: [{source: 'a:b', mount: /d, x: 1}]\n")),
      HasSubstr("unknown field 'x'"));
  EXPECT_THAT(DataSpecError(DataSpec("data: {source: 'a:b', mount: /d}\n")),
              HasSubstr("data:"));
  EXPECT_THAT(
      DataSpecError(DataSpec("data: [{source: relative/dir, mount: /d}]\n")),
      HasSubstr("neither REMOTE:PATH"));
}

TEST(DatasetSpecTest, SourcesNeverCarryCredentials) {
  EXPECT_TRUE(CheckDatasetSource("s3:bucket/x").ok());
  EXPECT_TRUE(CheckDatasetSource("my-remote.2:").ok());
  EXPECT_TRUE(CheckDatasetSource("/nfs/sets/a").ok());
  EXPECT_THAT(CheckDatasetSource(":s3,access_key_id=AK:bucket").message(),
              HasSubstr("on-the-fly remote"));
  EXPECT_THAT(CheckDatasetSource(":http:").message(),
              HasSubstr("on-the-fly remote"));
  EXPECT_THAT(CheckDatasetSource("s3,secret_access_key=x:bucket").message(),
              HasSubstr("connection string"));
  EXPECT_THAT(CheckDatasetSource("-x:bucket").message(),
              HasSubstr("not a remote name"));
  EXPECT_THAT(CheckDatasetSource("a\nb:c").message(),
              HasSubstr("control characters"));
  EXPECT_THAT(CheckDatasetSource("/a/../b").message(), HasSubstr(".."));
  EXPECT_FALSE(CheckDatasetSource("").ok());
  EXPECT_FALSE(CheckDatasetSource(std::string(2000, 'a') + ":").ok());
}

TEST(DatasetSpecTest, RcloneErrorTextDropsTheLogPrefix) {
  EXPECT_EQ(RcloneErrorText("2026/12/07 01:03:01 Failed to lsjson: x"),
            "Failed to lsjson: x");
  EXPECT_EQ(RcloneErrorText("2026/12/07 01:03:01 ERROR : a: b"), "a: b");
  EXPECT_EQ(RcloneErrorText("plain"), "plain");
  EXPECT_EQ(RcloneErrorText(""), "");
}

TEST(DatasetVersionTest, DependsOnTheFilesNotTheirOrder) {
  std::vector<DatasetEntry> a = {{"x/1.bin", 10, "", "2026-01-01T00:00:00Z"},
                                 {"x/0.bin", 20, "md5:abc", "2026-01-02"}};
  std::vector<DatasetEntry> b = {a[1], a[0]};
  const std::string v = DatasetVersion("s:a", a);
  EXPECT_TRUE(IsDatasetVersion(v)) << v;
  EXPECT_EQ(DatasetVersion("s:a", b), v);
  std::vector<DatasetEntry> c = a;
  c[0].size = 11;
  EXPECT_NE(DatasetVersion("s:a", c), v);
  c = a;
  c[0].modtime = "2026-01-01T00:00:01Z";
  EXPECT_NE(DatasetVersion("s:a", c), v);
  c = a;
  c[1].hash = "md5:abd";
  EXPECT_NE(DatasetVersion("s:a", c), v);
  c = a;
  c[1].modtime = "other";  // the checksum decides when there is one
  EXPECT_EQ(DatasetVersion("s:a", c), v);
  c = a;
  c.push_back({"x/2.bin", 0, "", ""});
  EXPECT_NE(DatasetVersion("s:a", c), v);
  EXPECT_TRUE(IsDatasetVersion(DatasetVersion("s:a", {})));
  // The same files under another source: another version.
  EXPECT_NE(DatasetVersion("s:b", a), v);
  EXPECT_FALSE(IsDatasetVersion("../../etc"));
  EXPECT_FALSE(IsDatasetVersion("0123456789ABCDEF"));
}

}  // namespace
}  // namespace loom
