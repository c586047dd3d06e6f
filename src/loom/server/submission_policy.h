#pragma once

// Who may submit what (docs/security.md, docs/cluster-spec.md): the checks
// of `POST /v1/jobs` between parsing a spec and handing it to the
// controller. Pure: no I/O, no state.

#include "absl/status/status.h"
#include "loom/core/cluster.h"
#include "loom/core/job_spec.h"
#include "loom/server/auth.h"

namespace loom {

// Checks `spec`, submitted by `p`, against `cluster`, and sets `spec->user`
// to `p.user` when the spec names none. In order:
// - only an admin may name another user, or root (PermissionDenied);
// - when the cluster spec declares projects, the job's must be one of them,
//   whoever submits (InvalidArgument, field `project`);
// - a non-admin submits only to its projects (PermissionDenied);
// - a non-admin uses only the priority classes its project may
//   (`Cluster::AllowedPriorityClasses`; PermissionDenied naming the class
//   and the project). A class the cluster does not define is left to
//   `ToJobRequest`, which names the classes there are.
absl::Status CheckSubmission(const Principal& p, const Cluster& cluster,
                             JobSpec* spec);

}  // namespace loom
