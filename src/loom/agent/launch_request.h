#pragma once

// A launch request (`POST /v1/tasks`, docs/agent.md): its parsed form and
// the checks every field passes before anything is made on the node.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/agent/task_launcher.h"
#include "nlohmann/json.hpp"

namespace loom {

// At most this many processes in one task.
inline constexpr int kMaxProcesses = 256;
// Leaves room for the ".p<k>" of the launcher ids of multi-process tasks
// (the launcher takes ids of up to 200 characters).
inline constexpr size_t kMaxTaskIdLength = 190;

// A parsed `POST /v1/tasks` body (docs/agent.md).
struct LaunchRequest {
  std::string node;  // empty: not given
  std::string task_id;
  // The job's user, whom the task runs as (`AgentOptions::run_as_user`);
  // empty: not given (the agent's own user).
  std::string user;
  int64_t job_id = 0;
  int64_t task_index = 0;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string working_dir;
  std::vector<int> gpus;
  int processes = 1;
  std::optional<int64_t> rank_base;
  TaskLimits limits;
};

// Parses and checks a launch body. On error, `InvalidArgument` with a
// message that names the field, and `*field` (when not null) set to it.
absl::StatusOr<LaunchRequest> ParseLaunchRequest(const nlohmann::json& body,
                                                 std::string* field = nullptr);

// Letters, digits, '-', '_' and '.' (not "." or ".."), at most
// `kMaxTaskIdLength`: safe as a file name.
bool ValidTaskId(std::string_view id);

// `InvalidArgument` "FIELD: WHAT", with `*out` (when not null) set to FIELD.
absl::Status FieldError(std::string* out, const std::string& field,
                        const std::string& what);

}  // namespace loom
