// Job arrays in Slurm's syntax (job_array.h).

#include "loom/core/job_array.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace loom {
namespace {

// A whole decimal number in [0, limit], digits only.
bool ReadArrayNumber(std::string_view text, int64_t limit, int64_t* out) {
  if (text.empty() || text.size() > 12) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &v)) {
    return false;
  }
  if (v > limit) return false;
  *out = v;
  return true;
}

absl::Status ArrayItemError(std::string_view item, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("array: '", absl::string_view(item.data(), item.size()),
                   "': ", absl::string_view(why.data(), why.size())));
}

}  // namespace

absl::StatusOr<ArraySpec> ParseArraySpec(std::string_view text) {
  ArraySpec spec;
  std::string_view list = text;
  if (size_t pct = text.find('%'); pct != std::string_view::npos) {
    list = text.substr(0, pct);
    int64_t m = 0;
    if (!ReadArrayNumber(text.substr(pct + 1), kMaxArrayElements, &m) ||
        m < 1) {
      return ArrayItemError(text.substr(pct),
                            absl::StrCat("%max must be a whole number from 1 "
                                         "to ",
                                         kMaxArrayElements));
    }
    spec.max_running = static_cast<int>(m);
  }
  if (list.empty()) {
    return absl::InvalidArgumentError(
        "array: no indices (write e.g. 0-99, 1,3,5 or 0-99:2%10)");
  }
  for (absl::string_view piece :
       absl::StrSplit(absl::string_view(list.data(), list.size()), ',')) {
    std::string_view item(piece.data(), piece.size());
    if (item.empty()) return ArrayItemError(list, "an empty item");
    std::string_view range = item;
    int64_t step = 1;
    if (size_t colon = item.find(':'); colon != std::string_view::npos) {
      range = item.substr(0, colon);
      if (!ReadArrayNumber(item.substr(colon + 1), kMaxArrayIndex, &step) ||
          step < 1) {
        return ArrayItemError(item, "the step must be a whole number >= 1");
      }
    }
    int64_t lo = 0, hi = 0;
    if (size_t dash = range.find('-'); dash != std::string_view::npos) {
      if (!ReadArrayNumber(range.substr(0, dash), kMaxArrayIndex, &lo) ||
          !ReadArrayNumber(range.substr(dash + 1), kMaxArrayIndex, &hi)) {
        return ArrayItemError(item,
                              absl::StrCat("indices are whole numbers from 0 "
                                           "to ",
                                           kMaxArrayIndex));
      }
      if (hi < lo) return ArrayItemError(item, "the range is reversed");
    } else {
      if (step != 1) {
        return ArrayItemError(item, "a step needs a range (A-B:S)");
      }
      if (!ReadArrayNumber(range, kMaxArrayIndex, &lo)) {
        return ArrayItemError(item,
                              absl::StrCat("indices are whole numbers from 0 "
                                           "to ",
                                           kMaxArrayIndex));
      }
      hi = lo;
    }
    if ((hi - lo) / step + 1 + static_cast<int64_t>(spec.indices.size()) >
        kMaxArrayElements) {
      return absl::InvalidArgumentError(
          absl::StrCat("array: '", absl::string_view(text.data(), text.size()),
                       "' has more than ", kMaxArrayElements, " elements"));
    }
    for (int64_t i = lo; i <= hi; i += step) {
      spec.indices.push_back(static_cast<int>(i));
    }
  }
  std::sort(spec.indices.begin(), spec.indices.end());
  spec.indices.erase(std::unique(spec.indices.begin(), spec.indices.end()),
                     spec.indices.end());
  return spec;
}

std::string FormatIndexRanges(const std::vector<int>& indices) {
  std::string out;
  size_t i = 0;
  while (i < indices.size()) {
    // The longest run from i at one step.
    size_t j = i;
    int step = 0;
    if (i + 1 < indices.size()) {
      step = indices[i + 1] - indices[i];
      j = i + 1;
      while (j + 1 < indices.size() && indices[j + 1] - indices[j] == step) {
        ++j;
      }
    }
    if (!out.empty()) out += ',';
    if (j == i || (step > 1 && j - i < 2)) {
      // One index alone, or a pair at a step: not worth a range.
      absl::StrAppend(&out, indices[i]);
      i += 1;
    } else if (step == 1) {
      absl::StrAppend(&out, indices[i], "-", indices[j]);
      i = j + 1;
    } else {
      absl::StrAppend(&out, indices[i], "-", indices[j], ":", step);
      i = j + 1;
    }
  }
  return out;
}

std::string FormatArraySpec(const ArraySpec& spec) {
  std::string out = FormatIndexRanges(spec.indices);
  if (spec.max_running > 0) absl::StrAppend(&out, "%", spec.max_running);
  return out;
}

std::string ArrayElementName(int64_t array_job, int index) {
  return absl::StrCat(array_job, "_", index);
}

absl::StatusOr<ArrayElementRef> ParseArrayElementRef(std::string_view text) {
  const size_t us = text.find('_');
  int64_t job = 0, index = 0;
  if (us == std::string_view::npos || us == 0 || text[0] == '0' ||
      !ReadArrayNumber(text.substr(0, us), INT64_C(999'999'999'999), &job) ||
      !ReadArrayNumber(text.substr(us + 1), kMaxArrayIndex, &index)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", absl::string_view(text.data(), text.size()),
                     "' is not an array element (write JOB_INDEX, e.g. 12_7)"));
  }
  return ArrayElementRef{job, static_cast<int>(index)};
}

}  // namespace loom
