#pragma once

// Job names (`name` in a job spec): what one may be, and the default a
// command or a script's file name gives. Pure functions.

#include <cstddef>
#include <string>
#include <string_view>

namespace loom {

// The longest job name.
inline constexpr size_t kMaxJobNameLength = 63;

// True for a job name: 1 to 63 lower-case letters, digits and '-', starting
// with a letter.
bool IsValidJobName(std::string_view name);

// A job name made from a path's basename (`./Run_All.sh` gives
// `run-all-sh`): lower-cased, every run of characters other than [a-z0-9]
// one '-', trimmed of '-', led by "job-" when it does not start with a letter
// ("job" when nothing is left), at most 63 characters. Always valid.
std::string JobNameFromPath(std::string_view path);

}  // namespace loom
