#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "loom/core/cluster.h"
#include "loom/server/auth.h"
#include "nlohmann/json.hpp"

namespace loom {

// What a caller sees of other users' work (docs/security.md, "Roles";
// docs/cluster-spec.md, `private_data`). Pure functions of the caller, the
// cluster's `private_data` and the API's JSON, called by the routes.

// Hides another user's command, environment, working directory and the
// sources of its datasets that are not named ones (named datasets are
// public: `loom dataset list`) from a caller that is neither the job's
// owner nor an admin: in the job's spec they become "(hidden: another
// user's job)", and wherever they appear in the rest of the job (its
// reason, its events, a task's error: an exec error quotes the argv) they
// are cut out as "(hidden)"; so are dataset versions (16 hex digits) when a
// source was hidden. Values under 4 bytes are not cut from text (they would
// mangle every message). `job` is the API form of a job (`GET
// /v1/jobs/{id}`).
void RedactJobFor(const Principal& p, nlohmann::json& job);

// Whether `p` may see a job of `user` in `project` at all: yes, unless the
// cluster's `private_data` has `jobs` and `p` is neither an admin nor an
// operator, nor the job's user, nor in its project (`Principal::InProject`),
// as Slurm's `PrivateData=jobs`.
bool MaySeeJob(const Principal& p, const PrivateData& private_data,
               std::string_view user, std::string_view project);

// Whether `MaySeeJob` can say no to `p` on this cluster (a listing for `p`
// must then be filtered before it is cut to a limit).
bool HidesJobsFrom(const Principal& p, const PrivateData& private_data);

// Job `job` (API form) as `p` may see it: PermissionDenied naming the job
// when `MaySeeJob` says no, else OK with `job` redacted (`RedactJobFor`).
absl::Status ShowJobTo(const Principal& p, const PrivateData& private_data,
                       nlohmann::json& job);

// Leaves out of `rows` (a JSON array of jobs or accounting rows, each with
// "user" and "project") those `p` may not see, then keeps the first `limit`
// (0 or less: all). Rows are not redacted.
void FilterJobsFor(const Principal& p, const PrivateData& private_data,
                   int64_t limit, nlohmann::json& rows);

// `GET /v1/usage`'s report as `p` may see it: when the cluster's
// `private_data` has `usage` and `p` is neither an admin nor an operator,
// only the rows of `p`'s own user (rows by user) or of its projects (rows by
// project) are kept, a row by both when either is `p`'s, and the totals are
// those of the rows kept.
void FilterUsageFor(const Principal& p, const PrivateData& private_data,
                    nlohmann::json& report);

// `GET /v1/datasets`'s list (`{"datasets": [...]}`) as `p` may see it: an
// entry without a name (a source used by jobs, not a named dataset, which
// is public) whose source is not in `own_sources` (the sources of `p`'s own
// jobs) gets "(hidden: another user's dataset)" as its source and loses its
// version and the nodes holding it; its counters stay. Admins see all.
void RedactDatasetsFor(const Principal& p,
                       const std::set<std::string>& own_sources,
                       nlohmann::json& datasets);

}  // namespace loom
