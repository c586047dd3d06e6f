#pragma once

#include "absl/time/time.h"
#include "loom/server/job_record.h"
#include "loom/store/accounting_store.h"
#include "nlohmann/json.hpp"

namespace loom {

// A job as accounting shows it (docs/accounting.md, `GET
// /v1/accounting/jobs`): one row of `loom sacct`. `live`: still in the
// controller's state (false: read back from the accounting store); `now`
// ends the elapsed time of a job that has not ended.
nlohmann::json JobAccountingJson(const JobRecord& job, absl::Time now,
                                 bool live);

// The job as the accounting store keeps it once purged: its row (with
// `live` false) and the fields the store filters on. `job` has ended.
FinishedJob FinishedJobOf(const JobRecord& job);

// Whether a job of the live state passes `query` (its filters and window;
// one that has not ended is in the window until `now`).
bool LiveJobMatches(const FinishedJobQuery& query, const JobRecord& job,
                    absl::Time now);

}  // namespace loom
