#include "loom/core/container_spec.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/common/units.h"
#include "loom/core/cluster_spec.h"
#include "loom/core/job_spec.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kDigest[] =
    "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

// A container of `image` with every other field at its default.
ContainerSpec Image(std::string image) {
  ContainerSpec c;
  c.image = std::move(image);
  return c;
}

// A minimal valid spec followed by `more`.
std::string Minimal(std::string_view more) {
  return absl::StrCat("name: j\ncommand: [\"true\"]\n", std::string(more));
}

// The message of the InvalidArgument that parsing `text` gives.
std::string ParseError(std::string_view text) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text, "spec.yaml");
  EXPECT_FALSE(spec.ok()) << "parsed unexpectedly:\n" << text;
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument)
      << spec.status();
  return std::string(spec.status().message());
}

TEST(ContainerSpec, ParsesEveryField) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(Minimal(R"(container:
  image: registry.example.com:5000/team/train:1.4
  mounts: ["/data:/data:ro", "/scratch/alice//x/:/scratch", "/a:/b:rw"]
  workdir: /w/./run/
  entrypoint: [/usr/bin/env, -i]
  writable: true
  shm_size: 16Gi
)"),
                                              "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->container.has_value());
  const ContainerSpec& c = *spec->container;
  EXPECT_EQ(c.image, "registry.example.com:5000/team/train:1.4");
  EXPECT_EQ(c.image_digest, "");
  EXPECT_THAT(c.mounts,
              ElementsAre(ContainerMount{"/data", "/data", true},
                          ContainerMount{"/scratch/alice/x", "/scratch", false},
                          ContainerMount{"/a", "/b", false}));
  EXPECT_EQ(c.workdir, "/w/run");
  ASSERT_TRUE(c.entrypoint.has_value());
  EXPECT_THAT(*c.entrypoint, ElementsAre("/usr/bin/env", "-i"));
  EXPECT_TRUE(c.writable);
  EXPECT_EQ(c.shm_size_bytes, 16 * kGiB);
  // The command stays the job's command.
  EXPECT_THAT(spec->command, ElementsAre("true"));
}

TEST(ContainerSpec, DefaultsAndAbsence) {
  absl::StatusOr<JobSpec> none = ParseJobSpec(Minimal(""), "spec.yaml");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->container.has_value());

  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      Minimal("container: {image: localhost:5000/busybox}\n"), "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->container.has_value());
  EXPECT_EQ(*spec->container, Image("localhost:5000/busybox"));
  EXPECT_FALSE(spec->container->entrypoint.has_value());

  // `entrypoint: []` is "no entrypoint", not "the image's".
  absl::StatusOr<JobSpec> empty = ParseJobSpec(
      Minimal("container: {image: localhost:5000/b, entrypoint: []}\n"),
      "spec.yaml");
  ASSERT_TRUE(empty.ok()) << empty.status();
  ASSERT_TRUE(empty->container->entrypoint.has_value());
  EXPECT_TRUE(empty->container->entrypoint->empty());
}

TEST(ContainerSpec, RoundTripsThroughStoredJson) {
  JobSpec spec;
  spec.name = "x";
  spec.command = {"python", "train.py"};
  ContainerSpec c;
  c.image = "host:5000/team/train:1.4";
  c.image_digest = kDigest;
  c.mounts = {{"/data", "/data", true}, {"/scratch/a", "/s", false}};
  c.workdir = "/w";
  c.entrypoint = std::vector<std::string>{};
  c.writable = true;
  c.shm_size_bytes = 16 * kGiB + 1;
  for (ContainerSpec variant : {c, Image("h.io/a@" + std::string(kDigest))}) {
    spec.container = variant;
    const std::string json = JobSpecToJson(spec);
    SCOPED_TRACE(json);
    absl::StatusOr<JobSpec> back = ParseStoredJobSpec(json, "stored");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, spec);
    EXPECT_EQ(JobSpecToJson(*back), json);
  }
  spec.container = c;
  EXPECT_THAT(JobSpecToJson(spec),
              HasSubstr(absl::StrCat(
                  R"("container":{"image":"host:5000/team/train:1.4",)",
                  R"("image_digest":")", kDigest, R"(",)",
                  R"("mounts":["/data:/data:ro","/scratch/a:/s"],)",
                  R"("workdir":"/w","entrypoint":[],"writable":true,)",
                  R"("shm_size":"17179869185"})")));
}

// Every bad input names its field and says what is wrong.
TEST(ContainerSpec, FieldErrors) {
  struct Case {
    std::string container;  // the value of `container:`
    std::string expected;   // a part of the message
  };
  const std::vector<Case> cases = {
      {"[]", "container: must be a map"},
      {"{}", "container.image: is required"},
      {"{image: \"\"}", "container.image: must not be empty"},
      {"{image: \"a b\"}", "container.image: 'a b' is not an image reference"},
      {"{image: [x]}", "container.image: must be a string, got a list"},
      {absl::StrCat("{image: ", std::string(600, 'a'), "}"),
       "container.image: is longer than 512 characters"},
      {"{image: h/a, img: x}",
       "container.img: unknown field 'img' (did you mean 'image'?)"},
      {"{image: h/a, writable:}", "container.writable: has no value"},
      {"{image: h/a, image_digest: sha256:abc}",
       "container.image_digest: 'sha256:abc' is not a digest"},
      {"{image: h/a, mounts: /data:/data}",
       "container.mounts: must be a list, got a scalar"},
      {"{image: h/a, mounts: [/data]}",
       "container.mounts[0]: '/data' is not a mount (write SRC:DST"},
      {"{image: h/a, mounts: [\"/a:/a\", \"/b:c\"]}",
       "container.mounts[1]: destination must be an absolute path, got 'c'"},
      {"{image: h/a, mounts: [\"data:/data\"]}",
       "container.mounts[0]: source must be an absolute path, got 'data'"},
      {"{image: h/a, mounts: [\"/data/../etc:/data\"]}",
       "container.mounts[0]: source must not contain '..'"},
      {"{image: h/a, mounts: [\"/data:/\"]}",
       "container.mounts[0]: destination must not be '/'"},
      {"{image: h/a, mounts: [\"/data:/dev/shm\"]}",
       "container.mounts[0]: destination '/dev/shm' is under /dev"},
      {"{image: h/a, mounts: [\"/data:/proc\"]}",
       "container.mounts[0]: destination '/proc' is under /proc"},
      {"{image: h/a, mounts: [\"/data:/d:rx\"]}",
       "container.mounts[0]: unknown mount option 'rx' (write ro or rw)"},
      {"{image: h/a, mounts: [\"/a:/b:ro:x\"]}",
       "container.mounts[0]: '/a:/b:ro:x' has more than three"},
      {"{image: h/a, mounts: [\"/data:/mnt,/x\"]}",
       "container.mounts[0]: destination '/mnt,/x' has a ',': paths with "
       "one cannot be mounted"},
      {"{image: h/a, mounts: [\"/da,ta:/data\"]}",
       "container.mounts[0]: source '/da,ta' has a ','"},
      {"{image: h/a, mounts: [\"/data:/a\\nb\"]}",
       "container.mounts[0]: destination '/a\\nb' has a control character"},
      {"{image: h/a, mounts: [\"/a:/d\", \"/b:/d/:ro\"]}",
       "container.mounts[1]: destination '/d' is already mounted by "
       "container.mounts[0]"},
      {"{image: h/a, mounts: [{source: /a}]}",
       "container.mounts[0]: must be a string SRC:DST[:ro], got a map"},
      {"{image: h/a, workdir: w}",
       "container.workdir: must be an absolute path, got 'w'"},
      {"{image: h/a, entrypoint: /bin/sh}",
       "container.entrypoint: must be a list of strings ([] for none), got a "
       "scalar"},
      {"{image: h/a, entrypoint: [\"\"]}",
       "container.entrypoint[0]: must not be empty"},
      {"{image: h/a, writable: yes}",
       "container.writable: must be true or false, got 'yes'"},
      {"{image: h/a, shm_size: 1.5x}", "container.shm_size:"},
      {"{image: h/a, shm_size: -1}", "container.shm_size:"},
      {"{image: h/a, shm_size: 2Pi}",
       "container.shm_size: must be at most 1Pi, got 2Pi"},
  };
  for (const Case& c : cases) {
    const std::string text =
        Minimal(absl::StrCat("container: ", c.container, "\n"));
    const std::string message = ParseError(text);
    EXPECT_THAT(message, HasSubstr(c.expected)) << text;
    // Every error has a position (line 3: the container line).
    EXPECT_THAT(message, ::testing::StartsWith("spec.yaml:3:")) << text;
  }
}

TEST(ContainerSpec, WorkingDirIsForHostProcesses) {
  EXPECT_EQ(ParseError(Minimal("working_dir: /w\ncontainer: {image: h/a}\n")),
            "spec.yaml:3:1: working_dir: does not apply to a job in an image "
            "(it is a host path); write container.workdir instead");
}

TEST(ContainerSpec, TooManyMounts) {
  std::string mounts;
  for (size_t i = 0; i <= kMaxContainerMounts; ++i) {
    absl::StrAppend(&mounts, i ? ", " : "", "\"/d:/m", i, "\"");
  }
  EXPECT_THAT(ParseError(Minimal(absl::StrCat("container: {image: h/a, "
                                              "mounts: [",
                                              mounts, "]}\n"))),
              HasSubstr("container.mounts: has 65 mounts; at most 64"));
}

TEST(ContainerMount, ParseAndText) {
  absl::StatusOr<ContainerMount> m = ParseContainerMount("/data/:/in//x:ro");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, (ContainerMount{"/data", "/in/x", true}));
  EXPECT_EQ(ContainerMountText(*m), "/data:/in/x:ro");
  EXPECT_EQ(ContainerMountText({"/a", "/b", false}), "/a:/b");
  EXPECT_FALSE(ParseContainerMount("").ok());
  EXPECT_FALSE(ParseContainerMount(":").ok());
  EXPECT_FALSE(ParseContainerMount("/a:").ok());
}

TEST(NormalizeAbsolutePath, Lexical) {
  EXPECT_EQ(*NormalizeAbsolutePath("/"), "/");
  EXPECT_EQ(*NormalizeAbsolutePath("//"), "/");
  EXPECT_EQ(*NormalizeAbsolutePath("/a//b/./c/"), "/a/b/c");
  EXPECT_EQ(*NormalizeAbsolutePath("/a/..b"), "/a/..b");
  EXPECT_FALSE(NormalizeAbsolutePath("").ok());
  EXPECT_FALSE(NormalizeAbsolutePath("a/b").ok());
  EXPECT_FALSE(NormalizeAbsolutePath("/a/../b").ok());
  EXPECT_FALSE(NormalizeAbsolutePath("/a/..").ok());
  EXPECT_FALSE(NormalizeAbsolutePath(std::string("/a\0b", 4)).ok());
  EXPECT_FALSE(NormalizeAbsolutePath("/" + std::string(5000, 'a')).ok());
}

TEST(PathIsUnder, ComponentWise) {
  EXPECT_TRUE(PathIsUnder("/data", "/data"));
  EXPECT_TRUE(PathIsUnder("/data/x/y", "/data"));
  EXPECT_FALSE(PathIsUnder("/database", "/data"));
  EXPECT_FALSE(PathIsUnder("/dat", "/data"));
  EXPECT_TRUE(PathIsUnder("/anything", "/"));
}

TEST(IsSha256DigestText, Form) {
  EXPECT_TRUE(IsSha256DigestText(kDigest));
  EXPECT_FALSE(IsSha256DigestText("sha256:abc"));
  EXPECT_FALSE(IsSha256DigestText(std::string("sha512:") + (kDigest + 7)));
  std::string upper = kDigest;
  upper.back() = 'F';
  EXPECT_FALSE(IsSha256DigestText(upper));
}

TEST(CheckContainerMounts, AgainstTheClustersList) {
  ContainerSpec spec = Image("h/a");
  // No mounts: fine whatever the cluster allows.
  EXPECT_TRUE(CheckContainerMounts(spec, {}).ok());
  spec.mounts = {{"/data/sets", "/data", true}, {"/etc", "/x", false}};
  absl::Status none = CheckContainerMounts(spec, {});
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.message(),
              HasSubstr("container.mounts[0]: '/data/sets' cannot be mounted: "
                        "the cluster allows no host directories"));
  absl::Status outside = CheckContainerMounts(spec, {"/data", "/scratch"});
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(outside.message(),
            "container.mounts[1]: '/etc' is not under a directory the cluster "
            "allows to be mounted (/data, /scratch)");
  spec.mounts[1].source = "/scratch";
  EXPECT_TRUE(CheckContainerMounts(spec, {"/data", "/scratch"}).ok());
  spec.mounts[1].source = "/scratchpad";
  EXPECT_FALSE(CheckContainerMounts(spec, {"/data", "/scratch"}).ok());
}

constexpr char kPools[] =
    "pools:\n  - {name: h200, nodes: 1, gpu: {model: h200, count: 8}, cpus: 8, "
    "memory: 64Gi}\n";

TEST(ClusterSpecContainers, AllowedMounts) {
  absl::StatusOr<Cluster> none = ParseClusterSpec(kPools, "c.yaml");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->containers.allowed_mounts.empty());

  absl::StatusOr<Cluster> c = ParseClusterSpec(
      absl::StrCat(kPools,
                   "containers: {allowed_mounts: [/data, \"/scratch//\"]}\n"),
      "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->containers.allowed_mounts, ElementsAre("/data", "/scratch"));

  absl::StatusOr<Cluster> empty =
      ParseClusterSpec(absl::StrCat(kPools, "containers: {}\n"), "c.yaml");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->containers.allowed_mounts.empty());
}

TEST(ClusterSpecContainers, AllowedRegistries) {
  absl::StatusOr<Cluster> none = ParseClusterSpec(kPools, "c.yaml");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->containers.allowed_registries.empty());
  absl::StatusOr<Cluster> c = ParseClusterSpec(
      absl::StrCat(kPools,
                   "containers: {allowed_registries: [Registry.Example.com, "
                   "\"10.0.0.5:5000\", \"[::1]:5000\", localhost]}\n"),
      "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->containers.allowed_registries,
              ElementsAre("registry.example.com", "10.0.0.5:5000", "[::1]:5000",
                          "localhost"));
}

TEST(ClusterSpecContainers, RegistryErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"containers: {allowed_registries: reg.example.com}",
       "c.yaml:3:34: containers.allowed_registries: must be a list"},
      {"containers: {allowed_registries: [\"reg.example.com/team\"]}",
       "c.yaml:3:35: containers.allowed_registries[0]: "
       "'reg.example.com/team' is not a registry host[:port]"},
      {"containers: {allowed_registries: [\"https://reg.example.com\"]}",
       "containers.allowed_registries[0]: 'https://reg.example.com' is not a "
       "registry"},
      {"containers: {allowed_registries: [\"reg:0\"]}",
       "containers.allowed_registries[0]: 'reg:0' is not a registry"},
      {"containers: {allowed_registries: [\"reg:65536\"]}",
       "containers.allowed_registries[0]: 'reg:65536' is not a registry"},
      {"containers: {allowed_registries: [\"reg:\"]}",
       "containers.allowed_registries[0]: 'reg:' is not a registry"},
      {"containers: {allowed_registries: [\"-reg.example.com\"]}",
       "containers.allowed_registries[0]: '-reg.example.com' is not a "
       "registry"},
      {"containers: {allowed_registries: [reg.example.com, REG.example.com]}",
       "containers.allowed_registries[1]: 'REG.example.com' is already "
       "listed as containers.allowed_registries[0]"},
      {"containers: {allowed_registries: [~]}",
       "containers.allowed_registries[0]: has no value"},
  };
  for (const auto& [yaml, expected] : cases) {
    absl::StatusOr<Cluster> c =
        ParseClusterSpec(absl::StrCat(kPools, yaml, "\n"), "c.yaml");
    ASSERT_FALSE(c.ok()) << yaml;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr(expected)) << yaml;
  }
}

TEST(CheckContainerRegistry, TheListOrAny) {
  EXPECT_TRUE(CheckContainerRegistry("anywhere:1", {}).ok());
  const std::vector<std::string> allowed = {"reg.example.com:5000",
                                            "mirror.example.com"};
  EXPECT_TRUE(CheckContainerRegistry("reg.example.com:5000", allowed).ok());
  EXPECT_TRUE(CheckContainerRegistry("REG.Example.com:5000", allowed).ok());
  EXPECT_TRUE(CheckContainerRegistry("mirror.example.com", allowed).ok());
  for (const char* other : {"reg.example.com", "reg.example.com:5001",
                            "mirror.example.com:443", "127.0.0.1:22"}) {
    absl::Status s = CheckContainerRegistry(other, allowed);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << other;
    EXPECT_EQ(s.message(),
              absl::StrCat("container.image: registry '", other,
                           "' is not one this cluster takes images from "
                           "(containers.allowed_registries: "
                           "reg.example.com:5000, mirror.example.com)"));
  }
}

TEST(IsRegistryHostPort, Grammar) {
  for (const char* good : {"localhost", "localhost:5000", "10.0.0.1:443",
                           "a-b.example.com", "[::1]", "[fe80::1]:5000"}) {
    EXPECT_TRUE(IsRegistryHostPort(good)) << good;
  }
  for (const char* bad :
       {"", ":5000", "a..b", "a-.b", "host:x", "host:0", "host:123456", "[]",
        "[::1", "[::1]x", "[::1]:", "a/b", "a_b", "host:5000:1"}) {
    EXPECT_FALSE(IsRegistryHostPort(bad)) << bad;
  }
}

TEST(ClusterSpecContainers, Errors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"containers: [x]", "c.yaml:3:13: containers: must be a map"},
      {"containers: {allowed: [/data]}",
       "c.yaml:3:14: containers.allowed: unknown field 'allowed'"},
      {"containers: {allowed_mounts: /data}",
       "c.yaml:3:30: containers.allowed_mounts: must be a list"},
      {"containers: {allowed_mounts: [data]}",
       "c.yaml:3:31: containers.allowed_mounts[0]: must be an absolute path, "
       "got 'data'"},
      {"containers: {allowed_mounts: [/data, /x/../etc]}",
       "c.yaml:3:38: containers.allowed_mounts[1]: must not contain '..'"},
      {"containers: {allowed_mounts: [/]}",
       "c.yaml:3:31: containers.allowed_mounts[0]: must not be '/'"},
      {"containers: {allowed_mounts: [/data, /data/]}",
       "c.yaml:3:38: containers.allowed_mounts[1]: '/data' is already listed "
       "as containers.allowed_mounts[0]"},
  };
  for (const auto& [yaml, expected] : cases) {
    absl::StatusOr<Cluster> c =
        ParseClusterSpec(absl::StrCat(kPools, yaml, "\n"), "c.yaml");
    ASSERT_FALSE(c.ok()) << yaml;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr(expected)) << yaml;
  }
}

}  // namespace
}  // namespace loom
