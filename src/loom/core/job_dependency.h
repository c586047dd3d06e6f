#pragma once

// Job dependencies (`dependency:` of a job spec, `loom run --dependency`),
// written as Slurm's `--dependency` (docs/job-spec.md, docs/scheduling.md):
// "afterok:12:13,singleton". What a dependency means for the queue is the
// controller's; this is its syntax.

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/core/job.h"
#include "loom/core/job_array.h"

namespace loom {

// The most job ids one dependency may name.
inline constexpr size_t kMaxDependencyJobs = 256;

struct JobDependency {
  enum class Kind {
    kAfter,       // the other job has started (or ended)
    kAfterAny,    // the other job has ended, however
    kAfterOk,     // the other job has succeeded
    kAfterNotOk,  // the other job has failed or was cancelled
    kSingleton,   // no earlier unfinished job of the same name and user
  };
  struct Term {
    Kind kind = Kind::kAfterOk;
    std::vector<JobId> jobs;  // empty for kSingleton
    // Array elements named as Slurm does ("afterok:12_7"), after `jobs`.
    std::vector<ArrayElementRef> elements;

    bool operator==(const Term&) const = default;
  };
  std::vector<Term> terms;
  // Joined by '?': any one condition (one job of one term) is enough;
  // else (',') every job of every term must satisfy its term.
  bool any = false;

  bool operator==(const JobDependency&) const = default;
};

// "after", "afterany", "afterok", "afternotok", "singleton".
std::string_view DependencyKindName(JobDependency::Kind kind);

// Parses Slurm's syntax: TYPE:ID[:ID...] (an ID may be an array element,
// 12_7) or `singleton`, several joined by
// ',' (all) or '?' (any), not both. Errors are InvalidArgument whose message
// quotes the text and says what is wrong, without a field name:
// "'afterok:x': job ids are numbers".
absl::StatusOr<JobDependency> ParseDependency(std::string_view text);

// The canonical text ("afterok:12:13,singleton"), which `ParseDependency`
// reads back to an equal value.
std::string FormatDependency(const JobDependency& dependency);

}  // namespace loom
