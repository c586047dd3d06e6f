// `loom _batch` and `srun` (batch_runtime.h).

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "loom/batch/batch_head.h"
#include "loom/batch/batch_host.h"
#include "loom/batch/batch_runtime.h"
#include "loom/batch/batch_wire.h"

extern char** environ;

namespace loom::batch {
namespace {

using Json = nlohmann::json;

Env ProcessEnv() {
  Env env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    env.emplace(std::string(*e, static_cast<size_t>(eq - *e)),
                std::string(eq + 1));
  }
  return env;
}

volatile std::sig_atomic_t g_srun_signal = 0;
void OnSrunSignal(int s) { g_srun_signal = s; }

void WriteOut(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// `srun -l`: every line led by its task's number, padded as Slurm pads it.
class Labeller {
 public:
  void set_width(int ntasks) {
    width_ = static_cast<int>(std::to_string(std::max(ntasks - 1, 0)).size());
  }
  void Add(const OutputChunk& c) {
    std::string& partial = partial_[{c.procid, c.stream}];
    partial.append(c.bytes);
    size_t start = 0;
    std::string out;
    for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos;
         start = nl + 1) {
      out += Prefix(c.procid);
      out.append(partial, start, nl + 1 - start);
    }
    partial.erase(0, start);
    WriteOut(c.stream == 1 ? STDOUT_FILENO : STDERR_FILENO, out);
  }
  void Flush() {
    for (auto& [key, partial] : partial_) {
      if (partial.empty()) continue;
      WriteOut(key.second == 1 ? STDOUT_FILENO : STDERR_FILENO,
               Prefix(key.first) + partial + "\n");
      partial.clear();
    }
  }

 private:
  std::string Prefix(uint32_t procid) const {
    std::string n = std::to_string(procid);
    if (static_cast<int>(n.size()) < width_) {
      n.insert(0, static_cast<size_t>(width_) - n.size(), ' ');
    }
    return n + ": ";
  }
  int width_ = 1;
  std::map<std::pair<uint32_t, uint8_t>, std::string> partial_;
};

}  // namespace

int RunBatchTask(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"loom", "_batch"};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<BatchInvocation> b = ParseBatchInvocation(argv);
  if (!b.ok()) {
    std::cerr << b.status().message() << std::endl;
    return 2;
  }
  Env env = ProcessEnv();
  int rank = 0;
  if (auto it = env.find("NODE_RANK");
      it != env.end() && !absl::SimpleAtoi(it->second, &rank)) {
    std::cerr << "loom _batch: NODE_RANK is not a number" << std::endl;
    return 2;
  }
  if (rank != 0) return RunStepHost(env);
  BatchHead head(*std::move(b), std::move(env));
  return head.Run();
}

int RunSrun(const std::vector<std::string>& args) {
  const char* socket_path = std::getenv("LOOM_BATCH_SOCKET");
  if (socket_path == nullptr || *socket_path == '\0') {
    std::cerr << "srun: error: not inside a loom batch job (LOOM_BATCH_SOCKET "
                 "is not set); outside one, run a job with `loom run --wait "
                 "-l`"
              << std::endl;
    return 1;
  }
  absl::StatusOr<SrunCommandLine> cl = ParseSrunArgs(args);
  if (!cl.ok()) {
    std::cerr << "srun: error: " << cl.status().message() << std::endl;
    return 1;
  }
  for (const std::string& w : cl->warnings) {
    std::cerr << "srun: warning: " << w << std::endl;
  }
  absl::StatusOr<int> fd = ConnectUnix(socket_path);
  if (!fd.ok()) {
    std::cerr << "srun: error: cannot reach the batch head: "
              << fd.status().message() << std::endl;
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSrunSignal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(s, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  char cwd[4096];
  const std::string here = ::getcwd(cwd, sizeof(cwd)) != nullptr ? cwd : "/";
  Conn conn(*fd);
  conn.Send(EncodeJsonFrame(
      FrameType::kRun, {{"args", args}, {"env", ProcessEnv()}, {"cwd", here}}));
  Labeller labels;
  const bool label = cl->options.label;
  while (true) {
    if (g_srun_signal != 0) {
      conn.Send(EncodeJsonFrame(FrameType::kSignal,
                                {{"signal", static_cast<int>(g_srun_signal)}}));
      g_srun_signal = 0;
    }
    pollfd p{conn.fd(),
             static_cast<short>(POLLIN | (conn.wants_write() ? POLLOUT : 0)),
             0};
    const int rc = ::poll(&p, 1, 200);
    if (rc < 0 && errno != EINTR) return 1;
    if (rc <= 0) continue;
    bool alive = true;
    if (p.revents & POLLOUT) alive = conn.Flush();
    if (alive && (p.revents & (POLLIN | POLLHUP | POLLERR)))
      alive = conn.Fill();
    while (true) {
      absl::StatusOr<std::optional<Frame>> f = conn.Next();
      if (!f.ok() || !f->has_value()) break;
      const Frame& frame = **f;
      if (frame.type == FrameType::kOutput) {
        absl::StatusOr<OutputChunk> c = DecodeOutput(frame.payload);
        if (!c.ok()) continue;
        if (label) {
          labels.Add(*c);
        } else {
          WriteOut(c->stream == 1 ? STDOUT_FILENO : STDERR_FILENO, c->bytes);
        }
        continue;
      }
      absl::StatusOr<Json> j = DecodeJson(frame);
      if (!j.ok()) continue;
      if (frame.type == FrameType::kStepStart) {
        labels.set_width(j->value("ntasks", 1));
      } else if (frame.type == FrameType::kError) {
        std::cerr << "srun: error: " << j->value("message", std::string())
                  << std::endl;
        return 1;
      } else if (frame.type == FrameType::kStepExit) {
        labels.Flush();
        return j->value("exit_code", 1);
      }
    }
    if (!alive) {
      labels.Flush();
      std::cerr << "srun: error: the batch job's head went away" << std::endl;
      return 1;
    }
  }
}

}  // namespace loom::batch
