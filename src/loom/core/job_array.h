#pragma once

// Job arrays (docs/scheduling.md, "Arrays"): one submission of N jobs that
// differ only in their index, in Slurm's `--array` syntax. Pure: parsing,
// the canonical form, and the compact range form that `loom queue` shows.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace loom {

// The most elements one array may have, and the largest index. Slurm's
// MaxArraySize defaults to 1001; loom allows more because a pending element
// costs the server almost nothing (it is not a record until it starts).
inline constexpr int kMaxArrayElements = 100'000;
inline constexpr int kMaxArrayIndex = 9'999'999;

struct ArraySpec {
  std::vector<int> indices;  // sorted, unique, each in [0, kMaxArrayIndex]
  int max_running = 0;       // `%max`: at most this many at once; 0: no cap
};

// Parses Slurm's array syntax: comma-separated items, each `N`, `A-B` or
// `A-B:S` (every S-th index from A up to B), then optionally `%M`, e.g.
// "0-999%10", "1,3,5-11:2". Returns InvalidArgument naming the item for a
// bad number, a reversed range, a step below 1, more than kMaxArrayElements
// indices or an index above kMaxArrayIndex.
absl::StatusOr<ArraySpec> ParseArraySpec(std::string_view text);

// The canonical text of `spec`: `FormatIndexRanges(indices)` plus `%M`.
std::string FormatArraySpec(const ArraySpec& spec);

// Sorted unique indices in the compact form: runs of consecutive indices
// as `A-B`, and runs of three or more at one step above 1 as `A-B:S`,
// joined with commas: {0,1,2,3,7,9,11,13} -> "0-3,7-13:2". ParseArraySpec
// of the result gives the indices back.
std::string FormatIndexRanges(const std::vector<int>& indices);

// An element's ID in Slurm's form: "12_7".
std::string ArrayElementName(int64_t array_job, int index);

// "12_7" split into the array job's ID and the element's index.
struct ArrayElementRef {
  int64_t array_job = 0;
  int index = 0;
  bool operator==(const ArrayElementRef&) const = default;
};
// Returns InvalidArgument when `text` is not `JOB_INDEX` with a canonical
// job ID and an index in [0, kMaxArrayIndex].
absl::StatusOr<ArrayElementRef> ParseArrayElementRef(std::string_view text);

}  // namespace loom
