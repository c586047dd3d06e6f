#include "loom/common/job_id.h"

#include <limits>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace loom {

absl::StatusOr<int64_t> ParseJobId(std::string_view text) {
  constexpr size_t kShown = 40;
  auto shown = [&] {
    std::string s = absl::CHexEscape(std::string(text.substr(0, kShown)));
    if (text.size() > kShown) s += "...";
    return s;
  };
  bool digits = !text.empty();
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (!digits || text[0] == '0') {
    return absl::InvalidArgumentError(
        absl::StrCat("'", shown(),
                     "' is not a job ID (a positive decimal "
                     "number such as 42)"));
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t id = 0;
  for (char c : text) {
    const int d = c - '0';
    if (id > (kMax - d) / 10) {
      return absl::OutOfRangeError(absl::StrCat(
          "job ID ", shown(), " is out of range (at most ", kMax, ")"));
    }
    id = id * 10 + d;
  }
  return id;
}

}  // namespace loom
