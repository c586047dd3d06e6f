#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace loom {

// Parses a job ID as the API and the CLI write it: a canonical positive
// decimal integer (digits only, no sign, no leading zero, no spaces; not
// octal or hex, as strtoll with base 0 would read "010" and "0x10") of at
// most 2^63-1. Returns InvalidArgument for anything else that is not a
// number, and OutOfRange (naming the number as written, never wrapped) for
// digits beyond 2^63-1, which can be no job's ID.
absl::StatusOr<int64_t> ParseJobId(std::string_view text);

}  // namespace loom
