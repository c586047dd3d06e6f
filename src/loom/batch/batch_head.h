#pragma once

// The batch head (docs/sbatch.md, "How it runs"): the task on node 0 of a
// `loom sbatch` job. It waits for the step hosts of the other nodes to join,
// runs the script with Slurm's environment, its output into the `-o`/`-e`
// files and the task's own log, serves the script's `srun` calls (planning
// each step over the allocation and launching it on its nodes), and ends
// with the script's exit code once every step is stopped.

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "loom/batch/batch_env.h"
#include "loom/batch/batch_wire.h"
#include "loom/batch/step_runner.h"
#include "loom/core/sbatch_job.h"

namespace loom::batch {

// Removes the private directories (`TMP/loom-batch-JOB-XXXXXX`) that heads
// killed with SIGKILL left behind: those owned by this user, older than
// `min_age_s` seconds, whose `srun.sock` no process listens on. A live head
// always listens, so it never loses its directory. Returns how many went.
int SweepStaleBatchDirs(const std::string& tmp, int64_t min_age_s);

class BatchHead {
 public:
  BatchHead(BatchInvocation invocation, Env task_env);
  ~BatchHead();
  // Runs the job; returns the process's exit code.
  int Run();

 private:
  struct Host {
    std::unique_ptr<Conn> conn;  // null for node 0 and once gone
  };
  struct Step {
    uint32_t id = 0;
    int client = -1;  // the srun connection; -1 once it is gone
    StepPlan plan;
    std::map<int, int> running;  // alloc node -> tasks not yet ended
    int remaining = 0;
    bool failing = false;
    int code = 0;
    int64_t kill_at_ms = 0;  // SIGKILL what still runs then; 0: not yet
  };

  absl::Status AcceptHosts();
  absl::Status PrepareDir();
  absl::Status OpenOutputs();
  absl::Status StartScript();
  void Loop();
  void Finish();

  void OnClientFrame(int client, const Frame& f);
  void OnHostFrame(int node, const Frame& f);
  void StartStep(int client, const nlohmann::json& request);
  void SignalStep(Step& step, int signal);
  void TaskEnded(int node, const TaskEnd& end);
  void HostLost(int node);
  void Route(OutputChunk chunk);
  void ClientGone(int client);
  void ScriptOutput(int* fd, int stream);
  void Say(std::string_view line);

  BatchInvocation b_;
  Env task_env_;
  BatchRuntime rt_;
  std::string token_;
  int listen_fd_ = -1;
  int srun_fd_ = -1;
  std::vector<Host> hosts_;  // by alloc node; [0] is this node
  std::map<int, std::unique_ptr<Conn>> clients_;
  // Output to each client, bounded (an srun whose stdout is not read).
  std::map<int, OutputSender> client_output_;
  int next_client_ = 0;
  std::map<uint32_t, Step> steps_;
  uint32_t next_step_ = 0;
  std::unique_ptr<StepRunner> local_;
  std::string dir_;
  std::string socket_path_;
  int out_file_ = -1;
  int err_file_ = -1;
  int script_out_ = -1;
  int script_err_ = -1;
  pid_t script_pid_ = -1;
  int script_status_ = 0;
  bool script_done_ = false;
};

}  // namespace loom::batch
