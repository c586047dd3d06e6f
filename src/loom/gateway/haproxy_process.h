#pragma once

// Runs one HAProxy in master-worker mode, in the foreground, as a child of
// this process: `haproxy -W -S <run_dir>/master.sock,mode,600 -f
// <run_dir>/haproxy.cfg`. The master supervises the worker that serves
// traffic and answers the master CLI (management guide, 9.4).
//
// Reloads go through the master CLI's `reload` (the same as SIGUSR2 to the
// master), not through starting a second haproxy with `-sf`: the master
// re-executes itself with `-sf <old worker> -x sockpair@...`, so the new
// worker receives the listening sockets from the old one over a socket
// pair (no moment without a listener, no refused connection) and the old
// worker finishes its requests and exits (bounded by `hard-stop-after`).
// With `-sf` we would have to start, watch and reap a separate process per
// reload and pass `-x <stats socket>` ourselves; the master does all of it
// and keeps one stable pid to supervise. The reload's outcome is read back
// from the master's `show proc` (its failed-reload counter and the new
// worker's pid), since HAProxy 2.6's `reload` answers nothing.
//
// Servers added at run time do not survive a reload (haproxy_config.h), so
// a reload writes the servers that are ready in the running worker into
// the new config as seeds: a service keeps serving through the reload.
//
// Not thread-safe: one owner (the gateway's loop) calls it, and the same
// owner drives the runtime API, so that no server changes between the
// seeding read and the reload.

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/gateway/haproxy_config.h"
#include "loom/gateway/haproxy_runtime.h"
#include "loom/gateway/run_dir.h"

namespace loom::gateway {

// The master CLI's `show proc`.
struct MasterProcs {
  int master_pid = 0;
  int reloads = 0;
  int failed_reloads = 0;
  std::vector<int> workers;      // serving now (normally one)
  std::vector<int> old_workers;  // left by reloads, finishing requests
};
// InvalidArgument when `text` has no master line.
absl::StatusOr<MasterProcs> ParseShowProc(std::string_view text);

struct HaproxyProcessOptions {
  std::string binary = "/usr/sbin/haproxy";
  // The directory for haproxy.cfg, master.sock and haproxy.log (the
  // master's and workers' own messages), opened and checked (run_dir.h:
  // ours alone, 0700); every file is written through it. Short enough that
  // "<run_dir>/master.sock" fits a unix socket address. Required.
  std::shared_ptr<const RunDir> run_dir;
  // How long a start or a reload may take until the new worker answers on
  // the stats socket.
  absl::Duration ready_timeout = absl::Seconds(15);
  // How long `Stop` lets a soft stop (requests in flight finish) take
  // before it stops HAProxy hard.
  absl::Duration stop_timeout = absl::Seconds(10);
  // Each runtime API and master CLI command.
  absl::Duration command_timeout = absl::Seconds(5);
  // SIGTERM to the master if the thread that started it exits (tests).
  bool terminate_with_parent = false;
};

class HaproxyProcess {
 public:
  explicit HaproxyProcess(HaproxyProcessOptions options);
  // Stops HAProxy if it runs.
  ~HaproxyProcess();
  HaproxyProcess(const HaproxyProcess&) = delete;
  HaproxyProcess& operator=(const HaproxyProcess&) = delete;

  // Validates `config` (ValidateConfig, then `haproxy -c`), writes it
  // atomically, starts HAProxy and waits until its worker answers on the
  // stats socket. Seed servers are used as given. `config.stats_socket`
  // must be in the run directory. Errors: FailedPrecondition when already
  // running, when the binary is missing, without a run directory, when
  // haproxy.log there is a symlink or not our own file (nothing is written
  // through it), or when another process answers on the sockets;
  // InvalidArgument for a stats socket elsewhere or a config HAProxy
  // refuses (with its words); Unavailable when HAProxy exits during start
  // (with the end of its log); DeadlineExceeded after `ready_timeout`.
  absl::Status Start(const HaproxyConfig& config);

  // Reloads only if `config`'s shape differs from the running one's
  // (`ConfigShape`): returns true after a reload, false when nothing needed
  // doing (the running process and its servers are left alone). Errors as
  // `Reload`.
  absl::StatusOr<bool> Apply(HaproxyConfig config);

  // Reloads with `config`, whose `seed_servers` are replaced, per service,
  // by the servers that are ready in the running worker. Validates, writes
  // the file atomically, sends `reload` to the master CLI, and waits until
  // a new worker answers on the stats socket. On a reload HAProxy rejects
  // (e.g. a port it cannot bind) the previous file is put back, the old
  // worker keeps serving, and the error (FailedPrecondition) carries the
  // end of HAProxy's log. FailedPrecondition when not running; Unavailable
  // when the running worker cannot be read (nothing is reloaded).
  absl::Status Reload(HaproxyConfig config);

  // Soft stop (SIGUSR1: the listeners close, requests in flight finish),
  // then after `stop_timeout` SIGTERM, then SIGKILL to the process group.
  // OK when not running.
  absl::Status Stop();

  // OK while HAProxy runs. Once it has exited: reaps it and returns
  // Unavailable with how it ended and the end of its log; `running()` is
  // false from then on (call `Start` again to restart it).
  absl::Status CheckRunning();

  bool running() const { return master_pid_ > 0; }
  pid_t master_pid() const { return master_pid_; }
  int worker_pid() const { return worker_pid_; }
  // The config HAProxy runs, seeds included.
  const HaproxyConfig& config() const { return config_; }
  // The runtime API of the running config's stats socket.
  HaproxyRuntime runtime() const;
  // The master CLI's `show proc`.
  absl::StatusOr<MasterProcs> ShowProc() const;

  std::string config_path() const;
  std::string master_socket() const;
  std::string log_path() const;

 private:
  // Writes `text` to a candidate file and runs `haproxy -c` on it.
  absl::Status CheckConfigText(const std::string& text) const;
  // Until `deadline`: a worker that is not `old_worker` in `show proc`, and
  // the stats socket answering with its pid. Sets `worker_pid_`.
  absl::Status WaitForWorker(int old_worker, int failed_before,
                             absl::Time deadline);
  // Fails if a live process answers on the socket `name` of the run
  // directory; removes a stale one (unlinkat).
  absl::Status ClaimSocket(const std::string& name) const;
  std::string LogTail() const;

  // Constant after construction.
  const HaproxyProcessOptions options_;

  pid_t master_pid_ = 0;
  int worker_pid_ = 0;
  HaproxyConfig config_;
  std::string config_text_;
};

}  // namespace loom::gateway
