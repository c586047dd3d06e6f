#include "loom/core/job_dependency.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "loom/core/job_dependency_yaml.h"
#include "yaml-cpp/yaml.h"

namespace loom {
namespace {

// The longest dependency text accepted.
constexpr size_t kMaxDependencyText = 4096;

struct DependencyKindEntry {
  absl::string_view name;
  JobDependency::Kind kind;
};

constexpr DependencyKindEntry kDependencyKinds[] = {
    {"after", JobDependency::Kind::kAfter},
    {"afterany", JobDependency::Kind::kAfterAny},
    {"afterok", JobDependency::Kind::kAfterOk},
    {"afternotok", JobDependency::Kind::kAfterNotOk},
    {"singleton", JobDependency::Kind::kSingleton},
};

absl::Status DependencyError(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("'", text, "': ", why));
}

}  // namespace

std::string_view DependencyKindName(JobDependency::Kind kind) {
  for (const DependencyKindEntry& e : kDependencyKinds) {
    if (e.kind == kind) return std::string_view(e.name.data(), e.name.size());
  }
  return "unknown";
}

absl::StatusOr<JobDependency> ParseDependency(std::string_view text) {
  const absl::string_view all(text.data(), text.size());
  if (absl::StripAsciiWhitespace(all).empty()) {
    return absl::InvalidArgumentError(
        "must not be empty (write e.g. afterok:12, or leave the field out)");
  }
  if (all.size() > kMaxDependencyText) {
    return absl::InvalidArgumentError(
        absl::StrCat("is ", all.size(), " characters long, more than the ",
                     kMaxDependencyText, " allowed"));
  }
  const bool has_and = absl::StrContains(all, ',');
  const bool has_or = absl::StrContains(all, '?');
  if (has_and && has_or) {
    return DependencyError(all,
                           "use either ',' (all must hold) or '?' (any one "
                           "must hold), not both");
  }
  JobDependency dep;
  dep.any = has_or;
  size_t jobs = 0;
  bool singleton = false;
  for (absl::string_view part : absl::StrSplit(all, has_or ? '?' : ',')) {
    absl::string_view item = absl::StripAsciiWhitespace(part);
    if (item.empty()) {
      return DependencyError(all, "an empty condition between separators");
    }
    std::vector<absl::string_view> fields = absl::StrSplit(item, ':');
    const std::string type = absl::AsciiStrToLower(fields[0]);
    const DependencyKindEntry* entry = nullptr;
    for (const DependencyKindEntry& e : kDependencyKinds) {
      if (e.name == type) entry = &e;
    }
    if (entry == nullptr) {
      const bool slurm_only =
          type == "aftercorr" || type == "afterburstbuffer" || type == "expand";
      return DependencyError(
          item, absl::StrCat(slurm_only ? "the dependency type '"
                                        : "unknown dependency type '",
                             fields[0], slurm_only ? "' is not supported" : "'",
                             " (write after, afterany, afterok, afternotok "
                             "or singleton)"));
    }
    JobDependency::Term term;
    term.kind = entry->kind;
    if (term.kind == JobDependency::Kind::kSingleton) {
      if (fields.size() > 1) {
        return DependencyError(item, "singleton takes no job ids");
      }
      if (singleton) continue;  // said twice: once is the same
      singleton = true;
      dep.terms.push_back(std::move(term));
      continue;
    }
    if (fields.size() < 2) {
      return DependencyError(item, absl::StrCat("needs at least one job id (",
                                                entry->name, ":ID[:ID...])"));
    }
    for (size_t i = 1; i < fields.size(); ++i) {
      absl::string_view id_text = absl::StripAsciiWhitespace(fields[i]);
      if (absl::StrContains(id_text, '+')) {
        return DependencyError(item,
                               "a delay after the job (+minutes) is not "
                               "supported");
      }
      if (absl::StrContains(id_text, '_')) {
        absl::StatusOr<ArrayElementRef> ref = ParseArrayElementRef(
            std::string_view(id_text.data(), id_text.size()));
        if (!ref.ok()) {
          return DependencyError(item,
                                 "an array element is JOB_INDEX, e.g. 12_7");
        }
        if (std::find(term.elements.begin(), term.elements.end(), *ref) !=
            term.elements.end()) {
          continue;
        }
        term.elements.push_back(*ref);
        if (++jobs > kMaxDependencyJobs) {
          return absl::InvalidArgumentError(
              absl::StrCat("names more than ", kMaxDependencyJobs, " jobs"));
        }
        continue;
      }
      int64_t id = 0;
      if (id_text.empty() ||
          !std::all_of(id_text.begin(), id_text.end(),
                       [](char c) { return absl::ascii_isdigit(c); }) ||
          !absl::SimpleAtoi(id_text, &id)) {
        return DependencyError(item, "job ids are numbers");
      }
      if (id < 1) return DependencyError(item, "job ids start at 1");
      if (std::find(term.jobs.begin(), term.jobs.end(), id) !=
          term.jobs.end()) {
        continue;
      }
      term.jobs.push_back(id);
      if (++jobs > kMaxDependencyJobs) {
        return absl::InvalidArgumentError(
            absl::StrCat("names more than ", kMaxDependencyJobs, " jobs"));
      }
    }
    dep.terms.push_back(std::move(term));
  }
  return dep;
}

std::string FormatDependency(const JobDependency& dependency) {
  std::vector<std::string> parts;
  for (const JobDependency::Term& t : dependency.terms) {
    std::string part(DependencyKindName(t.kind));
    for (JobId id : t.jobs) absl::StrAppend(&part, ":", id);
    for (const ArrayElementRef& e : t.elements) {
      absl::StrAppend(&part, ":", ArrayElementName(e.array_job, e.index));
    }
    parts.push_back(std::move(part));
  }
  return absl::StrJoin(parts, dependency.any ? "?" : ",");
}

namespace internal {

absl::StatusOr<std::string> ParseDependencyField(const yaml::Reader& reader,
                                                 const yaml::Field& field) {
  absl::StatusOr<std::string> text = reader.ReadString(field.value, field.key);
  if (!text.ok()) return text.status();
  absl::StatusOr<JobDependency> dep = ParseDependency(*text);
  if (!dep.ok()) {
    return reader.Error(field.value, field.key, dep.status().message());
  }
  return FormatDependency(*dep);
}

}  // namespace internal
}  // namespace loom
