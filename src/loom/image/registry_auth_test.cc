#include "loom/image/registry_auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/escaping.h"

namespace loom::image {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::string B64(const std::string& s) { return absl::Base64Escape(s); }

TEST(ImageRegistryAuth, ParsesDockersConfigJson) {
  const std::string json = R"({
    "auths": {
      "Registry.Example.com:5000": {"auth": ")" +
                           B64("alice:pa:ss") + R"("},
      "https://other.example.com/v1/": {"username": "bob", "password": "pw",
                                        "email": "bob@example.com"},
      "http://localhost:5001": {"auth": ")" +
                           B64("carol:") + R"(", "identitytoken": "refresh"}
    },
    "credsStore": "desktop",
    "HttpHeaders": {"User-Agent": "x"}
  })";
  absl::StatusOr<RegistryCredentials> c =
      RegistryCredentials::Parse(json, "/etc/loom/auth.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->Registries(),
              ElementsAre("localhost:5001", "other.example.com",
                          "registry.example.com:5000"));

  const RegistryCredential* a = c->For("registry.example.com:5000");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->username, "alice");
  EXPECT_EQ(a->password, "pa:ss");  // split at the first ':'
  EXPECT_TRUE(a->has_password());
  EXPECT_EQ(a->source,
            R"(/etc/loom/auth.json auths["Registry.Example.com:5000"])");
  EXPECT_EQ(c->For("REGISTRY.example.com:5000"), a);   // hosts ignore case
  EXPECT_EQ(c->For("registry.example.com"), nullptr);  // ports do not
  EXPECT_EQ(c->For("registry.example.com:5001"), nullptr);

  const RegistryCredential* b = c->For("other.example.com");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->username, "bob");
  EXPECT_EQ(b->password, "pw");

  const RegistryCredential* t = c->For("localhost:5001");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->username, "carol");
  EXPECT_EQ(t->identity_token, "refresh");
  EXPECT_FALSE(t->has_password());
  EXPECT_EQ(c->For("nothere.example.com"), nullptr);
}

// Each bad file: the error names the file and the key at fault, and never
// quotes the secret ("s3cret", in each of them).
TEST(ImageRegistryAuth, ErrorsNameTheFileAndKeyAndNoSecret) {
  struct Case {
    std::string json;
    std::string want;
  };
  const std::vector<Case> cases = {
      {R"({"auths": {"h.example.com": {"auth": "s3cret" x}}})",
       "f.json: not valid JSON at line 1, column 47"},
      {"{\"auths\": {\n\"h.example.com\": {\"auth\": \"s3cret\",}}}",
       "f.json: not valid JSON at line 2, column 36"},
      {R"({"auths": {"h.example.com": {"auth": "s3cret!!"}}})",
       R"(f.json: auths["h.example.com"].auth: not base64)"},
      {R"({"auths": {"h.example.com": {"auth": ")" + B64("alices3cret") +
           R"("}}})",
       R"(f.json: auths["h.example.com"].auth: its base64 decodes to no USER:PASSWORD (there is no ':'))"},
      {R"({"auths": {"h.example.com": {"auth": 7, "password": "s3cret"}}})",
       R"(f.json: auths["h.example.com"].auth: expected a string)"},
      {R"({"auths": {"h.example.com": {"username": "u"}}, "p": "s3cret"})",
       R"(f.json: auths["h.example.com"]: user name "u" has no password)"},
      {R"({"auths": {"h.example.com": {"password": "s3cret"}}})",
       R"(f.json: auths["h.example.com"]: a password without a user name)"},
      {R"({"auths": {"h.example.com": {}}, "p": "s3cret"})",
       R"(f.json: auths["h.example.com"]: no credentials)"},
      {R"({"auths": {"h.example.com": "s3cret"}})",
       R"(f.json: auths["h.example.com"]: expected an object)"},
      {R"({"auths": {"nohost": {"auth": "s3cret"}}})",
       R"(f.json: auths["nohost"]: not a registry HOST[:PORT])"},
      {R"({"auths": {"h.example.com": {"username": "u", "password": "s3cret"},
                     "https://H.example.com/": {"username": "u", "password": "s3cret"}}})",
       R"(f.json: auths["https://H.example.com/"]: the same registry as auths["h.example.com"])"},
      {R"({"auths": {"h.example.com": {"auth": ")" + B64("u:s3cret") +
           R"(", "password": "other"}}})",
       R"(f.json: auths["h.example.com"]: auth and username/password name different credentials)"},
      {R"({"credHelpers": {"h.example.com": "s3cret"}})",
       R"(f.json: no "auths" object)"},
      {R"(["s3cret"])", "f.json: expected a JSON object"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<RegistryCredentials> got =
        RegistryCredentials::Parse(c.json, "f.json");
    ASSERT_FALSE(got.ok()) << c.json;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(got.status().message());
    EXPECT_THAT(message, HasSubstr(c.want)) << c.json;
    EXPECT_THAT(message, Not(HasSubstr("s3cret"))) << c.json;
    EXPECT_THAT(message, Not(HasSubstr(B64("u:s3cret"))));
  }
}

class ImageRegistryAuthFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/registry_auth_test.XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/config.json";
    std::ofstream(path_) << R"({"auths": {"localhost:5000": {"auth": ")"
                         << B64("alice:s3cret") << R"("}}})";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_, path_;
};

TEST_F(ImageRegistryAuthFileTest, ReadsAPrivateFile) {
  ASSERT_EQ(::chmod(path_.c_str(), 0600), 0);
  absl::StatusOr<RegistryCredentials> c = RegistryCredentials::Load(path_);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_NE(c->For("localhost:5000"), nullptr);
  EXPECT_EQ(c->For("localhost:5000")->password, "s3cret");
  EXPECT_EQ(c->For("localhost:5000")->source,
            path_ + R"( auths["localhost:5000"])");
}

TEST_F(ImageRegistryAuthFileTest, RefusesAFileOthersMayRead) {
  for (mode_t mode : {0644, 0640, 0604, 0620}) {
    ASSERT_EQ(::chmod(path_.c_str(), mode), 0);
    absl::StatusOr<RegistryCredentials> c = RegistryCredentials::Load(path_);
    ASSERT_FALSE(c.ok()) << std::oct << mode;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(c.status().message(), HasSubstr(path_));
    EXPECT_THAT(c.status().message(), HasSubstr("group or others may read"));
    EXPECT_THAT(c.status().message(), HasSubstr("chmod 600 " + path_));
  }
  absl::StatusOr<RegistryCredentials> missing =
      RegistryCredentials::Load(dir_ + "/none.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(dir_ + "/none.json"));
  absl::StatusOr<RegistryCredentials> directory =
      RegistryCredentials::Load(dir_);
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace loom::image
