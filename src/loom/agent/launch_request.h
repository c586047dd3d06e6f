#pragma once

// A launch request (`POST /v1/tasks`, docs/agent.md): its parsed form and
// the checks every field passes before anything is made on the node.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/agent/dataset_cache.h"
#include "loom/agent/probe_spec.h"
#include "loom/agent/task_launcher.h"
#include "nlohmann/json.hpp"

namespace loom {

// At most this many processes in one task.
inline constexpr int kMaxProcesses = 256;
// Leaves room for the ".p<k>" of the launcher ids of multi-process tasks
// (the launcher takes ids of up to 200 characters).
inline constexpr size_t kMaxTaskIdLength = 190;

// A bind mount of a container task: a host path at `destination` inside.
struct ContainerBind {
  std::string source;       // absolute, on the host
  std::string destination;  // absolute, in the container
  bool readonly = false;
};

// The `container` of a launch body (docs/images.md): the task runs in the
// image `image` (pinned: `registry/repository@sha256:<hex>`), through runc.
struct ContainerRequest {
  std::string image;
  std::string image_ref;  // as the job's spec wrote it, for messages
  std::vector<ContainerBind> mounts;
  std::string workdir;  // empty: the image's WorkingDir, else "/"
  // Empty: the image's Entrypoint, unless `no_entrypoint` (the spec's
  // `entrypoint: []`): none.
  std::vector<std::string> entrypoint;
  bool no_entrypoint = false;
  bool writable = false;
  int64_t shm_size_bytes = 0;  // 0: the default (image_step.h)
};

// Parses the `container` object of a launch body; `InvalidArgument` naming
// the field ("container.mounts[0].destination: ...").
absl::StatusOr<ContainerRequest> ParseContainerRequest(
    const nlohmann::json& body, std::string* field = nullptr);

// The part of one GPU (`gpus` names exactly one) that a task runs on
// (docs/agent.md "MIG"): a MIG instance, or a share of the whole GPU.
struct SliceRequest {
  // MIG: the instance's profile (NVIDIA's name, "1g.18gb"), its index in
  // loom's profiles of the GPU (core/mig.h `MigProfilesFor`), its first
  // memory slice, and the layout (profile name, start) the GPU must have.
  // Empty `mig`: a share.
  std::string mig;
  int profile = 0;
  int start = 0;
  std::vector<std::pair<std::string, int>> layout;
  // A share (time-slicing) of the GPU: the memory it may use (not enforced).
  int64_t share_bytes = 0;
};

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
  // Set: the task runs in a container image.
  std::optional<ContainerRequest> container;
  // A service replica (docs/agent.md, "Service replicas"): `port` gives the
  // task a free TCP port of the node (`PORT`); the probes call it.
  bool port = false;
  std::optional<ProbeSpec> readiness;
  std::optional<ProbeSpec> liveness;
  // Set: the task runs on part of GPU `gpus[0]` (mig_step.h).
  std::optional<SliceRequest> slice;
  // Datasets to cache and show read-only (data_step.h, docs/datasets.md).
  std::vector<DatasetWant> data;
  // The node's pool lets tasks gain privileges through set-user-ID
  // programs (`TaskSpec::allow_privilege_escalation`); false by default.
  bool allow_privilege_escalation = false;
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
