#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/dataset_policy.h"
#include "loom/core/mig.h"
#include "loom/core/topology.h"

namespace loom {

// Index into `Cluster::gpu_models`.
using GpuModelId = int;
// A job that accepts any GPU model.
inline constexpr GpuModelId kAnyGpuModel = -1;
// The most GPUs one node may carry (the scheduler keeps a per-node bit mask).
inline constexpr int kMaxGpusPerNode = 16;

// A kind of GPU. `speed` is relative throughput: a job whose trace duration
// is D seconds runs D / speed seconds on this model in the simulator, and
// `any`-model jobs prefer faster models.
struct GpuModel {
  std::string name;  // lower case, e.g. "h200"
  double speed = 1.0;
  int64_t memory_bytes = 0;
};

// A pool's MIG partitions (docs/scheduling.md "GPU partitions"; the cluster
// spec's `mig:`). The first `gpus` GPUs of each node run in MIG mode with
// `layout`: instances by profile index into the pool's profiles
// (`MigProfilesFor`), each at its memory slice; a valid layout
// (`ValidateMigLayout`). With `dynamic`, the scheduler may repartition an
// idle MIG GPU when the queue asks for another profile, and turn a free
// whole GPU into a MIG one (back to whole when its last instance ends).
struct MigPool {
  int gpus = 0;
  std::vector<MigInstance> layout;
  bool dynamic = false;
  bool operator==(const MigPool&) const = default;
};

// A set of identical nodes.
struct PoolSpec {
  std::string name;
  int node_count = 0;
  GpuModelId gpu_model = 0;
  int gpus_per_node = 8;
  int64_t gpu_memory_bytes = 0;
  // GPUs per PCIe switch or NVLink domain where a node's GPUs are not all
  // joined (`gpu.domain`, e.g. 2 on an A100 PCIe node): GPUs 0..d-1 form
  // one domain, d..2d-1 the next. 0: all-to-all (NVSwitch).
  int gpu_domain = 0;
  int64_t cpus_milli = 0;  // CPU cores x 1000
  int64_t memory_bytes = 0;
  int64_t nvme_bytes = 0;
  int nics = 0;
  MigPool mig;
  // Whether a free whole GPU of the pool may be shared by tasks that ask for
  // part of its memory (`JobShape::slice.share_bytes`; time-slicing, no
  // isolation). The cluster spec's `sharing:`, true unless it says false.
  bool sharing = true;
  // Whether tasks on the pool's nodes may gain privileges through
  // set-user-ID programs and file capabilities (`su`, `sudo`, `ping`): the
  // cluster spec's `allow_privilege_escalation:`, false unless it says
  // true. False: every task runs with PR_SET_NO_NEW_PRIVS, as Kubernetes'
  // `allowPrivilegeEscalation: false` (docs/security.md).
  bool allow_privilege_escalation = false;
  std::map<std::string, std::string> labels;
  // Labels of single nodes of the pool (`node_labels: {h200-3: {rack: b}}`),
  // by node name; they win over `labels`.
  std::map<std::string, std::map<std::string, std::string>> node_labels;
  // The software stack the pool's nodes must run (`stack:`): "driver",
  // "cuda", "loom" (loom/core/labels.h `kStackKeys`) to versions. A node
  // whose agent reports another is drifted and gets no new work
  // (`StackDrift`). Empty: not checked.
  std::map<std::string, std::string> stack;
};

// One concrete node. Nodes are numbered densely from 0 in pool order; the
// number is the node's id everywhere in `sched`.
struct NodeSpec {
  std::string name;  // "<pool>-<index>", e.g. "h200-3"
  int pool = 0;
  GpuModelId gpu_model = 0;
  int gpus = 8;
  int64_t cpus_milli = 0;
  int64_t memory_bytes = 0;
  int64_t nvme_bytes = 0;
  int nics = 0;
  std::map<std::string, std::string> labels;
};

// An inclusive range of TCP ports (loom/core/service_ports.h).
struct ServicePortRange {
  int first = 0;
  int last = 0;
  bool operator==(const ServicePortRange&) const = default;
};

// A team: fair share is computed per project against `weight`; `quota_gpus`
// is the guaranteed share (0 = none). `priority_classes` are the classes its
// users may submit with; empty: the default ones
// (`Cluster::AllowedPriorityClasses`).
struct ProjectSpec {
  std::string name;
  int quota_gpus = 0;
  double weight = 1.0;
  std::vector<std::string> priority_classes;
  // Gateway ports its services may take besides the cluster's
  // `ServicePolicy::port_range` (the spec's `service_ports`).
  std::vector<ServicePortRange> service_ports;
};

struct PriorityClass {
  std::string name;
  int value = 0;
};

// What jobs in container images may do on this cluster (the cluster spec's
// `containers`).
struct ContainerPolicy {
  // Host directories (absolute, normalised) a job's `container.mounts` may
  // bind, each with everything under it. Empty: no mounts at all.
  std::vector<std::string> allowed_mounts;
  // Registries ("host" or "host:port", lower-case) job images may come
  // from: a reference to another is refused at submit, before the server
  // connects anywhere. Empty: any registry.
  std::vector<std::string> allowed_registries;
};

// What inference services may take on this cluster (the cluster spec's
// `services`).
struct ServicePolicy {
  // The gateway ports any project's services may take: Kubernetes' NodePort
  // range unless the spec says otherwise (`CheckServicePort`).
  ServicePortRange port_range{30000, 32767};
};

// What plain users see only of their own (the cluster spec's
// `private_data`, as Slurm's `PrivateData`). Admins and operators see
// everything either way.
struct PrivateData {
  // Jobs (queue, show, events, sacct) of other users outside the caller's
  // projects are left out.
  bool jobs = false;
  // `loom report usage` rows of other users and other projects are left
  // out.
  bool usage = false;
  bool operator==(const PrivateData&) const = default;
};

// The whole cluster as declared: the input of `sched` and of the simulator.
struct Cluster {
  std::string name;
  std::vector<GpuModel> gpu_models;
  std::vector<PoolSpec> pools;
  std::vector<NodeSpec> nodes;
  Topology topology;
  std::vector<ProjectSpec> projects;
  std::vector<PriorityClass> priority_classes;
  ContainerPolicy containers;
  DatasetPolicy datasets;
  ServicePolicy services;
  PrivateData private_data;

  int TotalGpus() const;
  int TotalGpus(GpuModelId model) const;
  // Returns the model's id, or -1 when the cluster has no such model.
  GpuModelId FindGpuModel(std::string_view name) const;
  // Returns the class's value, or nullptr when it is not defined.
  const PriorityClass* FindPriorityClass(std::string_view name) const;
  const ProjectSpec* FindProject(std::string_view name) const;
  // The priority classes a non-admin may submit to `project` with, in the
  // cluster's order: the project's `priority_classes` if it lists any, else
  // every class whose value is at most that of `normal` (the job spec's
  // default class; without one, the lowest class only), as Slurm grants
  // only the `normal` QOS until an admin adds others. A project the spec
  // does not declare gets the default too.
  std::vector<std::string> AllowedPriorityClasses(
      std::string_view project) const;
};

// The built-in GPU models: `h200` (speed 1.0, 141Gi) and `a100` (0.4, 80Gi).
std::vector<GpuModel> DefaultGpuModels();

// The default priority classes: low (0), normal (100), high (1000).
std::vector<PriorityClass> DefaultPriorityClasses();

}  // namespace loom
