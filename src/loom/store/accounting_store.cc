#include "loom/store/accounting_store.h"

#include <algorithm>

namespace loom {

bool FinishedJobMatches(const FinishedJobQuery& query, const FinishedJob& job) {
  if (!query.ids.empty() && std::find(query.ids.begin(), query.ids.end(),
                                      job.id) == query.ids.end()) {
    return false;
  }
  if (!query.user.empty() && job.user != query.user) return false;
  if (!query.project.empty() && job.project != query.project) return false;
  if (!query.states.empty() &&
      std::find(query.states.begin(), query.states.end(), job.state) ==
          query.states.end()) {
    return false;
  }
  // In the window [since, until): it ended at or after `since` and was
  // submitted before `until`.
  if (query.since.has_value() && job.end_time < *query.since) return false;
  if (query.until.has_value() && job.submit_time >= *query.until) {
    return false;
  }
  return true;
}

}  // namespace loom
