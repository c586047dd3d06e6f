// Slurm hostlist expansion and compression; see hostlist.h.

#include "loom/common/hostlist.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom {
namespace hostlist_internal {

constexpr size_t kMaxDigits = 18;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
         c == '\v';
}

absl::Status ItemError(std::string_view item, size_t pos,
                       const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "hostlist item '", std::string(item), "' at position ", pos, ": ", why));
}

// One `LO-HI` (or single number) of a bracket group.
struct Range {
  uint64_t lo = 0;
  uint64_t hi = 0;
  size_t width = 0;  // digits of the low end as written
};

// A piece of an item: literal text, or a bracket group.
struct Piece {
  std::string text;           // literal, when `ranges` is empty
  std::vector<Range> ranges;  // a bracket group
};

// Formats `n` zero-padded to `width` digits.
std::string PadNumber(uint64_t n, size_t width) {
  std::string digits = std::to_string(n);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

// Parses a decimal number of 1..18 digits; false otherwise.
bool ParseNumber(std::string_view s, uint64_t* value) {
  if (s.empty() || s.size() > kMaxDigits) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (!IsDigit(c)) return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *value = v;
  return true;
}

// Parses the inside of one bracket group (`001-004,007`), which starts at
// `pos` in the whole list.
absl::StatusOr<std::vector<Range>> ParseGroup(std::string_view item,
                                              std::string_view group,
                                              size_t pos) {
  std::vector<Range> ranges;
  size_t start = 0;
  while (true) {
    size_t comma = group.find(',', start);
    std::string_view part = group.substr(start, comma == std::string_view::npos
                                                    ? std::string_view::npos
                                                    : comma - start);
    const size_t part_pos = pos + start;
    if (part.empty()) return ItemError(item, part_pos, "empty range");
    size_t dash = part.find('-');
    std::string_view lo_text = part.substr(0, dash);
    std::string_view hi_text =
        dash == std::string_view::npos ? lo_text : part.substr(dash + 1);
    Range r;
    if (!ParseNumber(lo_text, &r.lo) || !ParseNumber(hi_text, &r.hi)) {
      return ItemError(
          item, part_pos,
          absl::StrCat("range '", std::string(part),
                       "' is not a number or LO-HI of numbers (at most ",
                       kMaxDigits, " digits each)"));
    }
    if (r.lo > r.hi) {
      return ItemError(item, part_pos,
                       absl::StrCat("range '", std::string(part),
                                    "' goes down (low end above high end)"));
    }
    r.width = lo_text.size();
    ranges.push_back(r);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return ranges;
}

// Splits one item (which starts at `pos` in the whole list) into pieces.
absl::StatusOr<std::vector<Piece>> ParseItem(std::string_view item,
                                             size_t pos) {
  std::vector<Piece> pieces;
  size_t i = 0;
  std::string literal;
  while (i < item.size()) {
    const char c = item[i];
    if (IsSpace(c)) {
      return ItemError(item, pos + i, "whitespace inside a host name");
    }
    if (c == ']') return ItemError(item, pos + i, "']' without '['");
    if (c != '[') {
      literal.push_back(c);
      ++i;
      continue;
    }
    size_t close = item.find_first_of("[]", i + 1);
    if (close == std::string_view::npos || item[close] == '[') {
      return ItemError(item, pos + i, "'[' without ']'");
    }
    if (!literal.empty()) pieces.push_back(Piece{std::move(literal), {}});
    literal.clear();
    absl::StatusOr<std::vector<Range>> ranges =
        ParseGroup(item, item.substr(i + 1, close - i - 1), pos + i + 1);
    if (!ranges.ok()) return ranges.status();
    pieces.push_back(Piece{"", *std::move(ranges)});
    i = close + 1;
  }
  if (!literal.empty()) pieces.push_back(Piece{std::move(literal), {}});
  return pieces;
}

// Appends every name of `pieces[k..]` after `stem` to `out`.
void ExpandPieces(const std::vector<Piece>& pieces, size_t k,
                  const std::string& stem, std::vector<std::string>* out) {
  if (k == pieces.size()) {
    out->push_back(stem);
    return;
  }
  const Piece& piece = pieces[k];
  if (piece.ranges.empty()) {
    ExpandPieces(pieces, k + 1, stem + piece.text, out);
    return;
  }
  for (const Range& r : piece.ranges) {
    for (uint64_t n = r.lo;; ++n) {
      ExpandPieces(pieces, k + 1, stem + PadNumber(n, r.width), out);
      if (n == r.hi) break;
    }
  }
}

// A host name split for sorting and compression.
struct SplitName {
  std::string prefix;
  bool has_number = false;
  uint64_t number = 0;
  size_t width = 0;  // digits as written
  std::string name;

  auto Key() const { return std::tie(prefix, has_number, number, width); }
};

SplitName Split(const std::string& name) {
  SplitName s;
  s.name = name;
  size_t i = name.size();
  while (i > 0 && IsDigit(name[i - 1])) --i;
  const size_t digits = name.size() - i;
  if (digits > 0 && digits <= kMaxDigits) {
    s.has_number = true;
    s.prefix = name.substr(0, i);
    s.width = digits;
    ParseNumber(std::string_view(name).substr(i), &s.number);
  } else {
    s.prefix = name;
  }
  return s;
}

std::vector<SplitName> SortedSplit(std::vector<std::string> hosts) {
  std::vector<SplitName> split;
  split.reserve(hosts.size());
  for (const std::string& h : hosts) split.push_back(Split(h));
  std::sort(
      split.begin(), split.end(),
      [](const SplitName& a, const SplitName& b) { return a.Key() < b.Key(); });
  split.erase(std::unique(split.begin(), split.end(),
                          [](const SplitName& a, const SplitName& b) {
                            return a.Key() == b.Key();
                          }),
              split.end());
  return split;
}

}  // namespace hostlist_internal

absl::StatusOr<std::vector<std::string>> ExpandHostlist(std::string_view list) {
  using hostlist_internal::IsSpace;
  std::vector<std::string> out;
  // Split at depth-0 commas.
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size()) {
      if (list[i] == '[') ++depth;
      if (list[i] == ']') --depth;
      if (list[i] != ',' || depth > 0) continue;
    }
    std::string_view item = list.substr(start, i - start);
    size_t pos = start;
    while (!item.empty() && IsSpace(item.front())) {
      item.remove_prefix(1);
      ++pos;
    }
    while (!item.empty() && IsSpace(item.back())) item.remove_suffix(1);
    if (item.empty()) {
      return absl::InvalidArgumentError(
          list.empty() ? std::string("hostlist is empty")
                       : absl::StrCat("hostlist '", std::string(list),
                                      "' has an empty item at position ", pos));
    }
    absl::StatusOr<std::vector<hostlist_internal::Piece>> pieces =
        hostlist_internal::ParseItem(item, pos);
    if (!pieces.ok()) return pieces.status();
    // Count before expanding, so a huge range fails without allocating.
    uint64_t count = 1;
    for (const hostlist_internal::Piece& p : *pieces) {
      if (p.ranges.empty()) continue;
      uint64_t group = 0;
      for (const hostlist_internal::Range& r : p.ranges) {
        group += r.hi - r.lo + 1;  // each <= 10^18, so no overflow here
        if (group > kMaxHostlistNames) break;
      }
      if (group > kMaxHostlistNames) {
        count = kMaxHostlistNames + 1;
        break;
      }
      count *= group;  // both <= kMaxHostlistNames: no overflow
      if (count > kMaxHostlistNames) break;
    }
    if (count > kMaxHostlistNames - out.size()) {
      return hostlist_internal::ItemError(
          item, pos,
          absl::StrCat("hostlist expands to more than ", kMaxHostlistNames,
                       " names"));
    }
    hostlist_internal::ExpandPieces(*pieces, 0, "", &out);
    start = i + 1;
  }
  return out;
}

std::vector<std::string> SortHostlist(std::vector<std::string> hosts) {
  std::vector<hostlist_internal::SplitName> split =
      hostlist_internal::SortedSplit(std::move(hosts));
  std::vector<std::string> out;
  out.reserve(split.size());
  for (hostlist_internal::SplitName& s : split)
    out.push_back(std::move(s.name));
  return out;
}

std::string CompressHostlist(const std::vector<std::string>& hosts) {
  using hostlist_internal::PadNumber;
  using hostlist_internal::Range;
  using hostlist_internal::SplitName;
  const std::vector<SplitName> split = hostlist_internal::SortedSplit(hosts);
  std::string out;
  size_t i = 0;
  while (i < split.size()) {
    if (!out.empty()) out += ',';
    const SplitName& first = split[i];
    if (!first.has_number) {
      out += first.name;
      ++i;
      continue;
    }
    // Ranges of this prefix: a run continues while the next name is the next
    // number and is written as the range's width would write it.
    std::vector<Range> ranges;
    size_t j = i;
    while (j < split.size() && split[j].has_number &&
           split[j].prefix == first.prefix) {
      const SplitName& s = split[j];
      if (!ranges.empty()) {
        Range& r = ranges.back();
        if (s.number == r.hi + 1 &&
            PadNumber(s.number, r.width) == s.name.substr(s.prefix.size())) {
          r.hi = s.number;
          ++j;
          continue;
        }
      }
      ranges.push_back(Range{s.number, s.number, s.width});
      ++j;
    }
    out += first.prefix;
    const bool bracket = ranges.size() > 1 || ranges[0].lo != ranges[0].hi;
    if (bracket) out += '[';
    for (size_t k = 0; k < ranges.size(); ++k) {
      if (k > 0) out += ',';
      out += PadNumber(ranges[k].lo, ranges[k].width);
      if (ranges[k].hi != ranges[k].lo) {
        out += '-';
        out += PadNumber(ranges[k].hi, ranges[k].width);
      }
    }
    if (bracket) out += ']';
    i = j;
  }
  return out;
}

}  // namespace loom
