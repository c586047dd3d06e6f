// The step host (docs/sbatch.md, "How it runs"): the task on every node of a
// `loom sbatch` job but the first. It joins the batch head, runs the step
// tasks the head sends it, hands their output and ends back, and ends when
// the head says the job is over (0) or goes away (1).

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <iostream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "loom/batch/batch_env.h"
#include "loom/batch/batch_runtime.h"
#include "loom/batch/batch_session.h"
#include "loom/batch/batch_wire.h"
#include "loom/batch/step_launch.h"
#include "loom/batch/step_runner.h"

namespace loom::batch {
namespace {

using Json = nlohmann::json;

volatile std::sig_atomic_t g_host_signal = 0;
void OnHostSignal(int s) { g_host_signal = s; }

std::string HostEnv(const Env& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

void HostSay(std::string_view line) {
  std::cerr << "loom _batch (step host): " << line << std::endl;
}

}  // namespace

int RunStepHost(const Env& task_env) {
  struct sigaction sa {};
  sa.sa_handler = OnHostSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  const std::string head = HostEnv(task_env, "MASTER_ADDR");
  int port = 0, index = 0;
  uint64_t job = 0;
  if (head.empty() ||
      !absl::SimpleAtoi(HostEnv(task_env, "MASTER_PORT"), &port) ||
      !absl::SimpleAtoi(HostEnv(task_env, "NODE_RANK"), &index) ||
      !absl::SimpleAtoi(HostEnv(task_env, "LOOM_JOB_ID"), &job)) {
    HostSay("MASTER_ADDR, MASTER_PORT, NODE_RANK or LOOM_JOB_ID is not set");
    return 1;
  }
  HostHello me{index, HostEnv(task_env, "LOOM_NODE"),
               HostEnv(task_env, "LOOM_NODE_HOST")};
  if (me.host.empty()) me.host = me.node;
  // The head may start after this task: try until it listens.
  const int64_t deadline = MonotonicMs() + kBatchJoinTimeoutMs;
  int fd = -1;
  std::string last_error;
  while (fd < 0) {
    if (g_host_signal != 0) return 128 + g_host_signal;
    if (MonotonicMs() > deadline) {
      HostSay(absl::StrCat("could not join the batch head at ", head, ":", port,
                           " within ", kBatchJoinTimeoutMs / 1000,
                           " s: ", last_error));
      return 1;
    }
    absl::StatusOr<int> c = ConnectTcp(head, port);
    if (!c.ok()) {
      last_error = std::string(c.status().message());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    fd = *c;
  }
  if (absl::Status st =
          JoinHead(fd, HostEnv(task_env, "LOOM_TOKEN"), job, me, 10'000);
      !st.ok()) {
    HostSay(absl::StrCat("the batch head at ", head, ":", port,
                         " refused this node: ", st.message()));
    ::close(fd);
    return 1;
  }
  Conn conn(fd);
  const Env node_env = NodeEnvironment(task_env);
  OutputSender output;  // bounded: a head that does not keep up
  StepRunner runner([&](OutputChunk c) { output.Send(conn, c); },
                    [&](const TaskEnd& e) {
                      conn.Send(EncodeJsonFrame(FrameType::kTaskExit,
                                                {{"step", e.step},
                                                 {"procid", e.procid},
                                                 {"exit_code", e.exit_code},
                                                 {"signal", e.signal}}));
                    });
  bool signalled = false;
  while (true) {
    if (g_host_signal != 0 && !signalled) {
      signalled = true;
      runner.SignalAll(g_host_signal);
    }
    std::vector<pollfd> fds;
    fds.push_back(
        {conn.fd(),
         static_cast<short>(POLLIN | (conn.wants_write() ? POLLOUT : 0)), 0});
    runner.AddPollFds(fds);
    const int rc = ::poll(fds.data(), fds.size(), 100);
    if (rc < 0 && errno != EINTR) return 1;
    bool alive = true;
    if (rc > 0) {
      if (fds[0].revents & POLLOUT) alive = conn.Flush();
      if (alive && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
        alive = conn.Fill();
      }
      while (true) {
        absl::StatusOr<std::optional<Frame>> f = conn.Next();
        if (!f.ok()) {
          alive = false;
          break;
        }
        if (!f->has_value()) break;
        const Frame& frame = **f;
        if (frame.type == FrameType::kExit) {
          runner.SignalAll(SIGKILL);
          for (int k = 0; k < 20 && !runner.empty(); ++k) {
            runner.Reap();
            if (!runner.empty()) ::usleep(50'000);
          }
          return signalled ? 128 + g_host_signal : 0;
        }
        absl::StatusOr<Json> j = DecodeJson(frame);
        if (!j.ok()) continue;
        if (frame.type == FrameType::kLaunch) {
          absl::StatusOr<StepLaunch> launch = StepLaunchFromJson(*j);
          if (!launch.ok()) {
            HostSay(std::string(launch.status().message()));
            continue;
          }
          const uint32_t step = launch->step;
          LaunchStepTasks(runner, *launch, node_env,
                          [&](uint32_t procid, const std::string& why) {
                            conn.Send(EncodeOutput(
                                {step, procid, 2, "srun: " + why + "\n"}));
                            conn.Send(EncodeJsonFrame(FrameType::kTaskExit,
                                                      {{"step", step},
                                                       {"procid", procid},
                                                       {"exit_code", 1},
                                                       {"signal", 0}}));
                          });
        } else if (frame.type == FrameType::kSignal) {
          runner.Signal(j->value("step", 0u), j->value("signal", SIGTERM));
        }
      }
      std::vector<pollfd> runner_fds(fds.begin() + 1, fds.end());
      runner.OnPoll(runner_fds);
    }
    if (!alive) {
      HostSay("the batch head went away; stopping this node's steps");
      runner.SignalAll(SIGKILL);
      for (int k = 0; k < 20 && !runner.empty(); ++k) {
        runner.Reap();
        if (!runner.empty()) ::usleep(50'000);
      }
      return 1;
    }
    runner.Reap();
  }
}

}  // namespace loom::batch
