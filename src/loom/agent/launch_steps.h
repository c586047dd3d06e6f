#pragma once

// A launch is a list of steps (Nomad's task hooks): each adds one concern to
// the processes of a task: their files, the env contract, their GPUs, their
// user, their limits, their checkpoint directory. `TaskRunner` runs them in
// order; a new concern (an image, a device, a NIC) is a new step, not another
// branch in the runner.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "loom/agent/agent_log.h"
#include "loom/agent/agent_node.h"
#include "loom/agent/gpu_driver_files.h"
#include "loom/agent/launch_request.h"
#include "loom/agent/task_launcher.h"
#include "loom/agent/user_account.h"
#include "nlohmann/json.hpp"

namespace loom {

struct ContainerLaunch;      // image_step.h
struct ContainerMountTrees;  // image_step.h

// What the steps of one launch share: the request, the node, and what
// earlier steps decided.
struct LaunchContext {
  const AgentNode& node;
  const LaunchRequest& request;
  const AgentLog& log;
  // Set by the user step: the account the processes run as; unset: the
  // agent's own user.
  std::optional<UserAccount> user;
  // Set by the checkpoint step: the job's directory on this node ("": none).
  std::string checkpoint_dir;
  // Set by the image step for a container task: the image, held.
  std::shared_ptr<const ContainerLaunch> container;
  // Set by the image step for a container task with mounts: their sources,
  // opened and checked at Prepare, held until the launch is over.
  std::shared_ptr<const ContainerMountTrees> container_mounts;
  // Set by the runner for a service replica (`port: true`): its port on
  // the node and the node's address that the probes call (replica_port.h).
  int port = 0;
  std::string port_host;
  // Set by the NIC step: the RDMA device files of the task's NICs, relative
  // to the node's device directory ("infiniband/uverbs0"), for the image
  // step (nic_step.h).
  std::vector<std::string> nic_devices;
  // Set by the MIG step (mig_step.h): the task's MIG instance ("MIG-...")
  // and its GPU instance id (-1: not known).
  std::string mig_uuid;
  int mig_gi = -1;
  // Set by the data step (data_step.h) once the datasets are cached: each
  // cached copy and its mount, for the image step's bundle; and the task's
  // holds on them, kept by its unit until it is forgotten.
  std::vector<std::pair<std::string, std::string>> data_binds;
  std::shared_ptr<const void> data_holds;
  // What each dataset's fill took ([{source, version, cached_bytes,
  // peer_bytes, cold_bytes, fill_ms, verified_files, peer}]): the task's
  // heartbeats report it (docs/datasets.md, "Seeing it").
  nlohmann::json data_report;
};

// One step of a launch. Implementations are stateless (constant after
// construction) and thread-safe: launches on several API threads share them.
class LaunchStep {
 public:
  virtual ~LaunchStep() = default;

  // For messages and docs: "gpus", "user", ...
  virtual std::string_view name() const = 0;

  // Once per task, before anything is made on the node: checks the request
  // against the node and decides what the processes share. An error fails
  // the launch with nothing made; `*field` names the request's field at
  // fault (the API answers 400 for `InvalidArgument` and
  // `FailedPrecondition`).
  virtual absl::Status Prepare(LaunchContext& ctx, std::string* field) const {
    return absl::OkStatus();
  }

  // Whether, after Prepare, this step has slow work left before the
  // processes can start (an image to pull). The runner then answers the
  // launch at once, the task `pulling`, and runs Fetch on a thread of its
  // own.
  virtual bool NeedsFetch(const LaunchContext& ctx) const { return false; }

  // The slow work, reporting to `meter`. An error fails the task, refused
  // (the server does not run it again), with the message.
  virtual absl::Status Fetch(LaunchContext& ctx, ImagePullMeter& meter) const {
    return absl::OkStatus();
  }

  // Once per process `k` of `proc` (its launcher id and log paths set):
  // adds this step's part to the process's spec.
  virtual void Apply(const LaunchContext& ctx, const TaskProcess& proc, int k,
                     TaskSpec& spec) const {}
};

using LaunchSteps = std::vector<std::unique_ptr<const LaunchStep>>;

struct LaunchStepsOptions {
  // `LOOM_SERVER` of every task: the servers the agent calls.
  std::vector<std::string> server_urls;
  // Run tasks as the users their requests name (the agent can switch
  // users); `lookup_user` finds them.
  bool switch_users = false;
  UserLookup lookup_user;
  // Default checkpoint directories under each node's directory; false
  // (fake tasks): none.
  bool checkpoint_dirs = true;
  // The container runtime of tasks in images (image_step.h), and where their
  // GPU driver files come from (gpu_driver_files.h).
  std::string runc = "runc";
  GpuDriverOptions gpu_driver;
  // The agent's own binary: a host-process task whose program is exactly
  // "loom" runs it (`loom _batch` of sbatch jobs, docs/sbatch.md), so that
  // a batch job runs the agent's version of loom whatever the node's PATH
  // holds. Empty: "loom" is looked up on PATH like any program.
  std::string self_exe;
};

// The steps of every launch, in order: task files (logs), the env contract
// (ranks, `LOOM_NODE`, `LOOM_SERVER`), a service replica's port (`PORT`),
// GPUs (index check,
// `CUDA_VISIBLE_DEVICES`), MIG (a slice's instance, mig_step.h), NICs
// (`NCCL_IB_HCA`, nic_step.h), limits (cgroups), user (checked before the
// checkpoint step needs it; applied after the others, since it picks the
// working directory last), checkpoint directory, "loom" as the agent's own
// binary (host processes only), and last the image (a container task's bundle
// takes what the others decided).
LaunchSteps DefaultLaunchSteps(const LaunchStepsOptions& options);

}  // namespace loom
