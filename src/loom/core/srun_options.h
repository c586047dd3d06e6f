#pragma once

// `srun` inside a loom batch script (docs/sbatch.md): its command line
// parsed, and a step's tasks laid out over the job's nodes as Slurm's block
// distribution does. Pure functions: no I/O, no clock, no environment.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom {

// The srun options loom understands. A field is empty when not given.
struct SrunOptions {
  std::optional<int> nodes;             // -N, --nodes (MIN of MIN-MAX)
  std::optional<int> ntasks;            // -n, --ntasks
  std::optional<int> ntasks_per_node;   // --ntasks-per-node
  std::optional<std::string> nodelist;  // -w, --nodelist (a hostlist)
  std::optional<std::string> exclude;   // -x, --exclude (a hostlist)
  bool label = false;                   // -l, --label
  std::optional<std::string> job_name;  // -J, --job-name (the step's name)
  std::optional<int> cpus_per_task;     // -c, --cpus-per-task
  std::vector<std::string> command;     // the program and its arguments

  bool operator==(const SrunOptions&) const = default;
};

// Options accepted and ignored with a warning: they change nothing about
// where a step runs or what it may use in loom. -u/--unbuffered (loom never
// buffers a step's output), -K/--kill-on-bad-exit[=N] (a failed task always
// stops its step), --mpi, --cpu-bind, --gpu-bind, -m/--distribution (tasks
// are always laid out in blocks), --exclusive and --overlap (steps always
// share the job's nodes), and --export=ALL (the only export srun has here).
inline constexpr const char* kSrunIgnoredOptions[] = {
    "unbuffered",   "kill-on-bad-exit", "mpi",     "cpu-bind", "gpu-bind",
    "distribution", "exclusive",        "overlap", "export"};

// The result of `ParseSrunArgs`.
struct SrunCommandLine {
  SrunOptions options;
  std::vector<std::string> warnings;  // ignored options
};

// Parses srun's command line (without the program name): options up to the
// first word that is not one (or `--`), then the command. Forms:
// `--opt=value`, `--opt value`, `-Xvalue`, `-X value`; flags without a value
// may be grouped (`-lu`). Errors are InvalidArgument naming the option:
// `--ntasks: "x" is not a number`, `unknown option "--frobnicate"`, `no
// command to run`.
absl::StatusOr<SrunCommandLine> ParseSrunArgs(
    const std::vector<std::string>& argv);

// One node of the job, in the job's order (node 0 runs the script).
struct AllocationNode {
  std::string name;  // the loom node name
  std::string host;  // its address, as the nodelist names it

  bool operator==(const AllocationNode&) const = default;
};

// One node's share of a step.
struct StepNodePlan {
  int node = 0;  // index into the allocation
  int tasks = 0;
  int first_procid = 0;  // SLURM_PROCID of its first task

  bool operator==(const StepNodePlan&) const = default;
};

// A step laid out over the allocation.
struct StepPlan {
  std::vector<StepNodePlan> nodes;  // in procid order
  int ntasks = 0;
  std::string nodelist;        // the nodes' hosts, compressed
  std::string tasks_per_node;  // SLURM_TASKS_PER_NODE: "2(x3),1"

  bool operator==(const StepPlan&) const = default;
};

// Lays a step out over `alloc`. Nodes are taken in nodelist order (hosts as
// `scontrol show hostnames $SLURM_JOB_NODELIST` lists them, so that procid 0
// runs on the first host it prints, the usual MASTER_ADDR), without -x's,
// and with -w's all included (each -w/-x entry matches a node's name or its
// host). The node count is -N; else, with -n and --ntasks-per-node, the
// fewest nodes that hold them; else, with -n alone, min(-n, nodes); else
// every candidate node (all of -w's when given). Tasks: -n; else nodes x
// --ntasks-per-node; else `default_ntasks` when no shape option was given
// at all (and it is at least the node count); else one per node. They are
// spread in blocks: each node gets ntasks / nodes, the first ntasks % nodes
// one more. Errors (InvalidArgument): more nodes than the job has, a -w
// name not in the job, -w and -x naming the same node, fewer tasks than
// nodes, more tasks than nodes x --ntasks-per-node.
absl::StatusOr<StepPlan> PlanStep(const SrunOptions& options,
                                  const std::vector<AllocationNode>& alloc,
                                  int default_ntasks);

// Slurm's compressed count list: {2,2,2,1} gives "2(x3),1".
std::string FormatTasksPerNode(const std::vector<int>& counts);

}  // namespace loom
