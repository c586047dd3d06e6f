#include "loom/server/submission_policy.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom {

absl::Status CheckSubmission(const Principal& p, const Cluster& cluster,
                             JobSpec* spec) {
  if (!p.admin() && !spec->user.empty() && spec->user != p.user) {
    return absl::PermissionDeniedError(
        absl::StrCat("user: you may only submit jobs as yourself (", p.user,
                     "), not as ", spec->user));
  }
  if (spec->user.empty()) spec->user = p.user;
  if (!p.admin() && spec->user == "root") {
    return absl::PermissionDeniedError(
        "user: only an admin may run jobs as root");
  }
  if (!cluster.projects.empty() &&
      cluster.FindProject(spec->project) == nullptr) {
    std::vector<std::string> names;
    for (const ProjectSpec& project : cluster.projects) {
      names.push_back(project.name);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("project: the cluster has no project '", spec->project,
                     "' (it has ", absl::StrJoin(names, ", "), ")"));
  }
  if (p.admin()) return absl::OkStatus();
  if (!p.InProject(spec->project)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "project: ", p.user, " is not a member of project ", spec->project));
  }
  if (cluster.FindPriorityClass(spec->priority) != nullptr) {
    const std::vector<std::string> allowed =
        cluster.AllowedPriorityClasses(spec->project);
    if (std::find(allowed.begin(), allowed.end(), spec->priority) ==
        allowed.end()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "priority: project ", spec->project, " may not use priority class '",
          spec->priority, "' (it may use ",
          allowed.empty() ? "none" : absl::StrJoin(allowed, ", "),
          "; an admin grants classes in the cluster spec: "
          "projects[].priority_classes)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace loom
