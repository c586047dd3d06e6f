#pragma once

// What the fuzz targets assert. A failed check prints why and aborts, which
// libFuzzer reports as a crash and saves the input (crash-<sha1>).

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace loom::fuzz {

[[noreturn]] inline void Fail(std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "loom fuzz check failed: %.*s\n%.*s\n",
               static_cast<int>(what.size()), what.data(),
               static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// `status` is an error of one of the codes a caller is promised.
inline void CheckErrorCode(const absl::Status& status,
                           std::initializer_list<absl::StatusCode> allowed,
                           std::string_view what) {
  for (absl::StatusCode code : allowed) {
    if (status.code() == code) return;
  }
  Fail(what, status.ToString());
}

}  // namespace loom::fuzz

#define LOOM_FUZZ_CHECK(cond, detail)                                 \
  do {                                                                \
    if (!(cond)) ::loom::fuzz::Fail(#cond " at " __FILE__, (detail)); \
  } while (false)
