#include "loom/store/state_store.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace loom {
namespace {

// Keys are bytes; error messages show them C-escaped and cut to a sane size.
std::string Printable(std::string_view key) {
  constexpr size_t kMaxShown = 200;
  std::string shown = absl::CEscape(
      std::string(key.substr(0, std::min(key.size(), kMaxShown))));
  if (key.size() > kMaxShown) absl::StrAppend(&shown, "...");
  return shown;
}

std::string DescribeVersion(int64_t version) {
  if (version == Condition::kMustNotExist) return "0 (absent)";
  if (version == Condition::kMustExist) return "-1 (present)";
  return absl::StrCat(version);
}

}  // namespace

absl::Status ValidateKey(std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("empty key");
  if (static_cast<int64_t>(key.size()) > StateStore::kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key \"", Printable(key), "\" is ", key.size(),
                     " bytes; the limit is ", StateStore::kMaxKeyBytes));
  }
  return absl::OkStatus();
}

absl::Status ValidatePrefix(std::string_view prefix) {
  if (static_cast<int64_t>(prefix.size()) > StateStore::kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefix \"", Printable(prefix), "\" is ", prefix.size(),
                     " bytes; the limit is ", StateStore::kMaxKeyBytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateCommit(const std::vector<Condition>& conditions,
                            const std::vector<Mutation>& mutations) {
  for (const Condition& c : conditions) {
    if (absl::Status s = ValidateKey(c.key); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("condition: ", s.message()));
    }
    if (c.version < Condition::kMustExist) {
      return absl::InvalidArgumentError(
          absl::StrCat("condition on key \"", Printable(c.key), "\": version ",
                       c.version, " is below -1"));
    }
  }
  absl::flat_hash_set<std::string_view> keys;
  keys.reserve(mutations.size());
  for (const Mutation& m : mutations) {
    if (absl::Status s = ValidateKey(m.key); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("mutation: ", s.message()));
    }
    if (m.kind != Mutation::kPut && m.kind != Mutation::kDelete) {
      return absl::InvalidArgumentError(
          absl::StrCat("mutation of key \"", Printable(m.key),
                       "\": unknown kind ", static_cast<int>(m.kind)));
    }
    if (m.kind == Mutation::kPut &&
        static_cast<int64_t>(m.value.size()) > StateStore::kMaxValueBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "value of key \"", Printable(m.key), "\" is ", m.value.size(),
          " bytes; the limit is ", StateStore::kMaxValueBytes));
    }
    if (!keys.insert(m.key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("key \"", Printable(m.key),
                       "\" is mutated more than once in one commit"));
    }
  }
  return absl::OkStatus();
}

bool ConditionHolds(const Condition& condition, int64_t actual_version) {
  if (condition.version == Condition::kMustExist) return actual_version > 0;
  return actual_version == condition.version;
}

absl::Status ConditionFailedError(const Condition& condition,
                                  int64_t actual_version) {
  return absl::FailedPreconditionError(
      absl::StrCat("condition failed on key \"", Printable(condition.key),
                   "\": expected version ", DescribeVersion(condition.version),
                   ", actual version ", DescribeVersion(actual_version)));
}

std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last != 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return end;
}

bool HasPrefix(std::string_view key, std::string_view prefix) {
  return key.substr(0, prefix.size()) == prefix;
}

}  // namespace loom
