#include "loom/core/job_dependency.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/core/job_spec.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Kind = JobDependency::Kind;

TEST(ParseDependency, GoodForms) {
  absl::StatusOr<JobDependency> d = ParseDependency("afterok:12:13");
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->terms.size(), 1u);
  EXPECT_EQ(d->terms[0].kind, Kind::kAfterOk);
  EXPECT_THAT(d->terms[0].jobs, ElementsAre(12, 13));
  EXPECT_FALSE(d->any);

  d = ParseDependency("after:1,afterany:2,afternotok:3,singleton");
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->terms.size(), 4u);
  EXPECT_EQ(d->terms[0].kind, Kind::kAfter);
  EXPECT_EQ(d->terms[1].kind, Kind::kAfterAny);
  EXPECT_EQ(d->terms[2].kind, Kind::kAfterNotOk);
  EXPECT_EQ(d->terms[3].kind, Kind::kSingleton);
  EXPECT_TRUE(d->terms[3].jobs.empty());

  // Array elements, as Slurm writes them, after the plain IDs.
  d = ParseDependency("afterok:12_3:9:12_3");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->terms[0].jobs, ElementsAre(9));
  ASSERT_EQ(d->terms[0].elements.size(), 1u);
  EXPECT_EQ(d->terms[0].elements[0].array_job, 12);
  EXPECT_EQ(d->terms[0].elements[0].index, 3);
  EXPECT_EQ(FormatDependency(*d), "afterok:9:12_3");

  d = ParseDependency("afterok:4?afternotok:5");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->any);
  EXPECT_EQ(FormatDependency(*d), "afterok:4?afternotok:5");

  // Case and spaces around conditions are forgiven; repeats are dropped.
  d = ParseDependency(" AfterOK:7:7 , singleton,singleton");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(FormatDependency(*d), "afterok:7,singleton");
}

TEST(ParseDependency, RoundTrips) {
  for (const char* text :
       {"afterok:1", "after:1:2:3", "afterany:9,afterok:10", "singleton",
        "afternotok:3?afterok:4", "singleton,afterok:5"}) {
    absl::StatusOr<JobDependency> d = ParseDependency(text);
    ASSERT_TRUE(d.ok()) << text << ": " << d.status();
    EXPECT_EQ(FormatDependency(*d), text);
    absl::StatusOr<JobDependency> again = ParseDependency(FormatDependency(*d));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *d);
  }
}

TEST(ParseDependency, BadForms) {
  struct Case {
    const char* text;
    const char* error;
  };
  for (const Case& c : {
           Case{"", "must not be empty"},
           Case{"afterok:x", "'afterok:x': job ids are numbers"},
           Case{"afterok:-1", "job ids are numbers"},
           Case{"afterok:12_x", "an array element is JOB_INDEX"},
           Case{"afterok:012_3", "an array element is JOB_INDEX"},
           Case{"afterok:0", "job ids start at 1"},
           Case{"afterok", "'afterok': needs at least one job id"},
           Case{"afterok:", "job ids are numbers"},
           Case{"afterwards:1", "unknown dependency type 'afterwards'"},
           Case{"aftercorr:1", "'aftercorr' is not supported"},
           Case{"after:1+10", "+minutes"},
           Case{"singleton:3", "singleton takes no job ids"},
           Case{"afterok:1,,afterok:2", "an empty condition"},
           Case{"afterok:1,afterok:2?afterok:3", "not both"},
           Case{"afterok:99999999999999999999", "job ids are numbers"},
       }) {
    absl::StatusOr<JobDependency> d = ParseDependency(c.text);
    ASSERT_FALSE(d.ok()) << c.text;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(d.status().message(), HasSubstr(c.error)) << c.text;
  }
}

constexpr char kDependentSpec[] = R"(name: train
command: ./train.sh
)";

TEST(JobSpecDependency, ParsedAndWrittenBack) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      std::string(kDependentSpec) +
          "dependency: afterok:12:13,singleton\nkill_on_invalid_dep: true\n",
      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->dependency, "afterok:12:13,singleton");
  EXPECT_TRUE(spec->kill_on_invalid_dep);
  const std::string json = JobSpecToJson(*spec);
  EXPECT_THAT(json, HasSubstr("\"dependency\":\"afterok:12:13,singleton\""));
  absl::StatusOr<JobSpec> back = ParseJobSpec(json, "stored");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *spec);

  // Without one, the canonical form has neither field.
  absl::StatusOr<JobSpec> plain = ParseJobSpec(kDependentSpec, "job.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(JobSpecToJson(*plain), ::testing::Not(HasSubstr("dependency")));
  EXPECT_THAT(JobSpecToJson(*plain),
              ::testing::Not(HasSubstr("kill_on_invalid_dep")));
}

TEST(JobSpecDependency, ErrorsNameTheField) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      std::string(kDependentSpec) + "dependency: afterok:x\n", "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(),
            "job.yaml:3:13: dependency: 'afterok:x': job ids are numbers");

  spec = ParseJobSpec(std::string(kDependentSpec) + "dependency: [1, 2]\n",
                      "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("dependency: "));

  spec = ParseJobSpec(std::string(kDependentSpec) + "dependency: \"\"\n",
                      "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("dependency: "));

  spec = ParseJobSpec(
      std::string(kDependentSpec) + "kill_on_invalid_dep: maybe\n", "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("kill_on_invalid_dep: "));
}

}  // namespace
}  // namespace loom
