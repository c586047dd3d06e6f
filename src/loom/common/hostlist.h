#pragma once

// Slurm's hostlist syntax (`node[001-004,007],login1`): expanding it into
// host names, as `scontrol show hostnames` does, and compressing host names
// back into it, as SLURM_JOB_NODELIST is written. Pure functions: no I/O.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace loom {

// The most names one hostlist may expand to; more is an error, so that a
// mistyped range (`n[1-999999999]`) cannot exhaust memory.
inline constexpr size_t kMaxHostlistNames = 1'000'000;

// Expands a hostlist into host names, in the order written.
//
// The list is items separated by ',' (a ',' inside brackets separates
// ranges instead); whitespace around an item is ignored. An item is a name
// with zero or more bracket groups, each a ','-separated list of numbers or
// `LO-HI` ranges: `node[001-004,007]`, `a[1-2]b`, `r[1-2]n[1-2]`. A number
// keeps the width of its range's low end (`n[08-11]` gives n08 n09 n10 n11;
// a number wider than that is written in full). With several groups the
// first varies slowest, as in Slurm: `r[1-2]n[1-2]` gives r1n1 r1n2 r2n1
// r2n2. Duplicates are kept.
//
// Returns `InvalidArgument` whose message quotes the item and the character
// position (0-based, in `list`) for: an empty item or list, an unbalanced or
// nested bracket, an empty range, a non-numeric range or one with a sign, a
// range whose low end exceeds its high end, a number of more than 18 digits,
// whitespace inside an item, or more than `kMaxHostlistNames` names.
absl::StatusOr<std::vector<std::string>> ExpandHostlist(std::string_view list);

// Compresses host names into the shortest hostlist this library writes:
// {node001,node002,node003,node007} gives "node[001-003,007]".
//
// Each name is split into a prefix and its trailing decimal digits, if any
// (`node007` is "node" and 7 of width 3; `a1b` has no number and stays as
// it is, as does a name whose trailing number has more than 18 digits).
// Names are first put in `SortHostlist` order with duplicates
// removed; then runs of consecutive numbers with the same prefix and
// compatible width become `LO-HI` ranges (n9,n10 gives n[9-10]; n08..n11
// gives n[08-11]; n1 and n001 stay separate ranges), and neighbouring ranges
// with the same prefix share one bracket. A prefix with a single number is
// written without brackets (`n7`). Names without a trailing number are
// written as they are. `ExpandHostlist(CompressHostlist(x))` equals
// `SortHostlist(x)` for names that contain none of ",[]" nor whitespace
// (names that do cannot be written as a hostlist; they are passed through
// unchanged and the result will not expand back).
std::string CompressHostlist(const std::vector<std::string>& hosts);

// Sorts host names and removes duplicates, in the order `CompressHostlist`
// writes them: by prefix (bytewise), a name without a trailing number before
// the numbered ones of the same prefix, then by number, then by the number's
// width (n1 before n01). Like Slurm's, this is a natural order: n2 before
// n10.
std::vector<std::string> SortHostlist(std::vector<std::string> hosts);

}  // namespace loom
