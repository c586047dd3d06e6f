#pragma once

// The default checkpoint directory of a job on a node (docs/agent.md,
// "Checkpoint directory"): used when neither the job spec (`checkpoint.dir`)
// nor the server (`--checkpoint-root`, meant for a shared filesystem) names
// one, that is when a launch's `env` has no `LOOM_CHECKPOINT_DIR`.
//
//   <node dir>/checkpoints/            0711, the agent's: nobody else can
//                                      create (or list) names in it
//   <node dir>/checkpoints/<job id>/   0700, owned by the task's user
//
// The directory is per node: a job restarted on another node does not find
// it. Jobs that must resume elsewhere need a shared filesystem (their own
// `checkpoint.dir`, or the server's `--checkpoint-root`). The agent never
// removes it (the job may run here again); see docs/agent.md.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace loom {

// Makes `<root>/<job_id>` (and `root`, mode 0711) for a task of job `job_id`
// that runs as `uid`:`gid` (unset: the agent's own ids), and returns its
// path. An existing directory is kept (a restarted job finds its
// checkpoints) and given to `uid`:`gid` with mode 0700 again. Changing the
// owner needs root. `InvalidArgument` for a job id below 1;
// `FailedPrecondition` when the path exists and is not a directory (a
// symbolic link included); the errno of the failing step otherwise.
absl::StatusOr<std::string> PrepareCheckpointDir(const std::string& root,
                                                 int64_t job_id,
                                                 std::optional<uid_t> uid,
                                                 std::optional<gid_t> gid);

// The default checkpoint directory for a launch of job `job_id` on the node
// whose directory is `node_dir`, with environment `env`, for a task that
// runs as `owner` (uid, gid; unset: the agent's ids): "" when there is
// nothing to do (`env` names a LOOM_CHECKPOINT_DIR, `node_dir` is empty,
// `job_id` < 1), else `PrepareCheckpointDir(<node_dir>/checkpoints, ...)`,
// whose errors say "no checkpoint directory: ...".
absl::StatusOr<std::string> DefaultCheckpointDir(
    const std::string& node_dir, int64_t job_id,
    const std::map<std::string, std::string>& env,
    std::optional<std::pair<uid_t, gid_t>> owner);

}  // namespace loom
