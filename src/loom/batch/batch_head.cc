#include "loom/batch/batch_head.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "loom/batch/batch_session.h"
#include "loom/batch/step_launch.h"
#include "loom/core/sbatch_script.h"

extern char** environ;

namespace loom::batch {
namespace {

using Json = nlohmann::json;

constexpr int kHandshakeMs = 5'000;
// A failed task's step: the others get SIGTERM, then SIGKILL this later.
constexpr int64_t kStepKillGraceMs = 10'000;

volatile std::sig_atomic_t g_head_signal = 0;
void OnHeadSignal(int s) { g_head_signal = s; }

std::string EnvOr(const Env& env, const char* name, std::string fallback) {
  auto it = env.find(name);
  return it != env.end() && !it->second.empty() ? it->second : fallback;
}

void WriteAll(int fd, std::string_view data) {
  while (fd >= 0 && !data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

int ExitCodeOf(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

}  // namespace

BatchHead::BatchHead(BatchInvocation invocation, Env task_env)
    : b_(std::move(invocation)), task_env_(std::move(task_env)) {
  rt_ = RuntimeFromEnv(task_env_);
  token_ = EnvOr(task_env_, "LOOM_TOKEN", "");
}

BatchHead::~BatchHead() {
  for (int fd : {listen_fd_, srun_fd_, out_file_, script_out_, script_err_}) {
    if (fd >= 0) ::close(fd);
  }
  if (err_file_ >= 0 && err_file_ != out_file_) ::close(err_file_);
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

void BatchHead::Say(std::string_view line) {
  std::cerr << "loom _batch: " << line << std::endl;
}

absl::Status BatchHead::AcceptHosts() {
  int world = 1;
  (void)absl::SimpleAtoi(EnvOr(task_env_, "WORLD_SIZE", "1"), &world);
  if (world < 1) world = 1;
  const std::string addr = EnvOr(task_env_, "MASTER_ADDR", "127.0.0.1");
  const std::string self_host = EnvOr(task_env_, "LOOM_NODE_HOST", addr);
  hosts_.resize(static_cast<size_t>(world));
  rt_.nodes.assign(static_cast<size_t>(world), AllocationNode{});
  rt_.nodes[0] = {EnvOr(task_env_, "LOOM_NODE", self_host), self_host};
  if (world == 1) return absl::OkStatus();
  int port = 0;
  if (!absl::SimpleAtoi(EnvOr(task_env_, "MASTER_PORT", ""), &port)) {
    return absl::FailedPreconditionError("MASTER_PORT is not set");
  }
  absl::StatusOr<int> fd = ListenTcp(addr, port);
  if (!fd.ok()) return fd.status();
  listen_fd_ = *fd;
  int joined = 1;
  const int64_t deadline = MonotonicMs() + kBatchJoinTimeoutMs;
  while (joined < world) {
    const int64_t left = deadline - MonotonicMs();
    if (left <= 0 || g_head_signal != 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(world - joined, " of the job's ", world - 1,
                       " other nodes did not join within ",
                       kBatchJoinTimeoutMs / 1000, " s"));
    }
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 500))) <= 0) {
      continue;
    }
    const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    absl::StatusOr<HostHello> hello =
        AcceptHost(c, token_, rt_.job_id, kHandshakeMs);
    if (!hello.ok() || hello->index < 1 || hello->index >= world ||
        hosts_[static_cast<size_t>(hello->index)].conn != nullptr) {
      Say(absl::StrCat("refused a connection: ",
                       hello.ok() ? "not one of the job's nodes"
                                  : std::string(hello.status().message())));
      ::close(c);
      continue;
    }
    const size_t i = static_cast<size_t>(hello->index);
    hosts_[i].conn = std::make_unique<Conn>(c);
    rt_.nodes[i] = {hello->node, hello->host};
    ++joined;
  }
  // No one else joins: later connections are refused by the kernel.
  ::close(listen_fd_);
  listen_fd_ = -1;
  return absl::OkStatus();
}

int SweepStaleBatchDirs(const std::string& tmp, int64_t min_age_s) {
  namespace fs = std::filesystem;
  int removed = 0;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (auto it = fs::directory_iterator(tmp, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("loom-batch-", 0) != 0) continue;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != ::geteuid()) {
      continue;
    }
    std::error_code e2;
    const auto mtime = fs::last_write_time(it->path(), e2);
    if (e2 || now - mtime < std::chrono::seconds(min_age_s)) continue;
    // A live head listens on its socket: leave it.
    absl::StatusOr<int> fd = ConnectUnix((it->path() / "srun.sock").string());
    if (fd.ok()) {
      ::close(*fd);
      continue;
    }
    fs::remove_all(it->path(), e2);
    if (!e2) ++removed;
  }
  return removed;
}

absl::Status BatchHead::PrepareDir() {
  const std::string tmp = EnvOr(task_env_, "TMPDIR", "/tmp");
  // What heads killed with SIGKILL (a node's agent killing a job's group)
  // left here: their cleanup never ran.
  if (const int n = SweepStaleBatchDirs(tmp, 60); n > 0) {
    Say(absl::StrCat("removed ", n,
                     " directories of batch heads that were "
                     "killed in ",
                     tmp));
  }
  std::string templ = absl::StrCat(tmp, "/loom-batch-", rt_.job_id, "-XXXXXX");
  if (::mkdtemp(templ.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("mkdtemp in ", tmp, ": ", std::strerror(errno)));
  }
  dir_ = templ;
  const std::string bin = dir_ + "/bin";
  std::error_code ec;
  std::filesystem::create_directory(bin, ec);
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return absl::InternalError("cannot read /proc/self/exe");
  for (const char* name : {"srun", "scontrol", "loom"}) {
    std::filesystem::create_symlink(self, bin + "/" + name, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot make ", bin, "/", name, ": ", ec.message()));
    }
  }
  const std::string script = dir_ + "/slurm_script";
  const int fd =
      ::open(script.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot write ", script, ": ", std::strerror(errno)));
  }
  WriteAll(fd, b_.script);
  ::close(fd);
  socket_path_ = dir_ + "/srun.sock";
  absl::StatusOr<int> s = ListenUnix(socket_path_);
  if (!s.ok()) return s.status();
  srun_fd_ = *s;
  return absl::OkStatus();
}

absl::Status BatchHead::OpenOutputs() {
  OutputPatternValues v;
  v.job_id = rt_.job_id;
  v.array_job_id = rt_.array_job_id;
  if (rt_.array_task_id) {
    v.array_task_id = static_cast<uint32_t>(*rt_.array_task_id);
  }
  v.job_name = b_.job_name;
  v.first_node = rt_.nodes[0].name;
  v.user = rt_.user;
  auto open = [](const std::string& path) -> absl::StatusOr<int> {
    const int fd =
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
    }
    return fd;
  };
  const std::string out = ExpandOutputPattern(b_.output, v);
  absl::StatusOr<int> o = open(out);
  if (!o.ok()) return o.status();
  out_file_ = *o;
  err_file_ = out_file_;
  if (!b_.error.empty()) {
    const std::string err = ExpandOutputPattern(b_.error, v);
    if (err != out) {
      absl::StatusOr<int> e = open(err);
      if (!e.ok()) return e.status();
      err_file_ = *e;
    }
  }
  return absl::OkStatus();
}

absl::Status BatchHead::StartScript() {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  const Env env =
      ScriptEnvironment(task_env_, b_, rt_, dir_ + "/bin", socket_path_);
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = {dir_ + "/slurm_script"};
  argv_strings.insert(argv_strings.end(), b_.args.begin(), b_.args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  // Signals stay blocked across fork until the child has its default
  // handlers back: a SIGTERM right at the start must not run the head's
  // handler in the child and be lost (as in step_runner.cc).
  sigset_t all, old_mask;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  const pid_t pid = ::fork();
  if (pid != 0) ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    for (int s : {SIGINT, SIGTERM, SIGPIPE, SIGHUP}) ::signal(s, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    const char* why = std::strerror(errno);
    const std::string msg =
        absl::StrCat("loom _batch: cannot run the script: ", why, "\n");
    WriteAll(STDERR_FILENO, msg);
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  if (devnull >= 0) ::close(devnull);
  script_pid_ = pid;
  script_out_ = out[0];
  script_err_ = err[0];
  for (int fd : {script_out_, script_err_}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  return absl::OkStatus();
}

void BatchHead::ScriptOutput(int* fd, int stream) {
  char buf[65536];
  while (*fd >= 0) {
    const ssize_t n = ::read(*fd, buf, sizeof(buf));
    if (n > 0) {
      const std::string_view data(buf, static_cast<size_t>(n));
      WriteAll(stream == 1 ? out_file_ : err_file_, data);
      WriteAll(stream == 1 ? STDOUT_FILENO : STDERR_FILENO, data);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    ::close(*fd);
    *fd = -1;
  }
}

void BatchHead::Route(OutputChunk chunk) {
  auto it = steps_.find(chunk.step);
  if (it == steps_.end() || it->second.client < 0) return;
  auto c = clients_.find(it->second.client);
  if (c != clients_.end()) {
    client_output_[it->second.client].Send(*c->second, chunk);
  }
}

void BatchHead::SignalStep(Step& step, int signal) {
  for (const auto& [node, left] : step.running) {
    if (left <= 0) continue;
    if (node == 0) {
      local_->Signal(step.id, signal);
    } else if (hosts_[static_cast<size_t>(node)].conn != nullptr) {
      hosts_[static_cast<size_t>(node)].conn->Send(EncodeJsonFrame(
          FrameType::kSignal, {{"step", step.id}, {"signal", signal}}));
    }
  }
}

void BatchHead::TaskEnded(int node, const TaskEnd& end) {
  auto it = steps_.find(end.step);
  if (it == steps_.end()) return;
  Step& s = it->second;
  --s.remaining;
  --s.running[node];
  const int code = end.signal != 0 ? 128 + end.signal : end.exit_code;
  if (code != 0 && !s.failing) {
    // As torchrun and loom's own tasks: one failed rank stops the step.
    s.failing = true;
    s.code = code;
    s.kill_at_ms = MonotonicMs() + kStepKillGraceMs;
    SignalStep(s, SIGTERM);
  }
  if (s.remaining > 0) return;
  if (s.client >= 0) {
    auto c = clients_.find(s.client);
    if (c != clients_.end()) {
      c->second->Send(
          EncodeJsonFrame(FrameType::kStepExit, {{"exit_code", s.code}}));
    }
  }
  steps_.erase(it);
}

void BatchHead::HostLost(int node) {
  Host& h = hosts_[static_cast<size_t>(node)];
  if (h.conn == nullptr) return;
  h.conn.reset();
  Say(absl::StrCat("node ", rt_.nodes[static_cast<size_t>(node)].name,
                   " left the job"));
  std::vector<uint32_t> ids;
  for (const auto& [id, s] : steps_) ids.push_back(id);
  for (uint32_t id : ids) {
    auto it = steps_.find(id);
    if (it == steps_.end()) continue;
    const int left = it->second.running[node];
    for (int k = 0; k < left; ++k) {
      TaskEnded(node, TaskEnd{id, 0, 255, 0});
      if (!steps_.contains(id)) break;
    }
  }
}

void BatchHead::ClientGone(int client) {
  clients_.erase(client);
  client_output_.erase(client);
  for (auto& [id, s] : steps_) {
    if (s.client != client) continue;
    s.client = -1;
    SignalStep(s, SIGKILL);
  }
}

void BatchHead::StartStep(int client, const Json& request) {
  Conn& conn = *clients_.at(client);
  auto refuse = [&](std::string_view why) {
    conn.Send(EncodeJsonFrame(FrameType::kError, {{"message", why}}));
  };
  std::vector<std::string> args;
  Env env;
  std::string cwd;
  try {
    args = request.at("args").get<std::vector<std::string>>();
    env = request.at("env").get<Env>();
    cwd = request.at("cwd").get<std::string>();
  } catch (const Json::exception&) {
    return refuse("bad request");
  }
  absl::StatusOr<SrunCommandLine> cl = ParseSrunArgs(args);
  if (!cl.ok()) return refuse(std::string(cl.status().message()));
  SrunOptions o = cl->options;
  if (!o.nodes && !o.ntasks && !o.ntasks_per_node && !o.nodelist &&
      !o.exclude) {
    o.ntasks = b_.ntasks;  // the job's shape, as sbatch gave it
    o.ntasks_per_node = b_.ntasks_per_node;
  }
  absl::StatusOr<StepPlan> plan = PlanStep(o, rt_.nodes, b_.ntasks);
  if (!plan.ok()) return refuse(std::string(plan.status().message()));
  for (const StepNodePlan& n : plan->nodes) {
    if (n.node != 0 && hosts_[static_cast<size_t>(n.node)].conn == nullptr) {
      return refuse(absl::StrCat("node ",
                                 rt_.nodes[static_cast<size_t>(n.node)].name,
                                 " has left the job"));
    }
  }
  absl::StatusOr<int> port = FreeTcpPort();
  Step step;
  step.id = next_step_++;
  step.client = client;
  step.plan = *plan;
  step.remaining = plan->ntasks;
  for (const StepNodePlan& n : plan->nodes) step.running[n.node] = n.tasks;
  StepLaunch launch;
  launch.step = step.id;
  launch.plan = *plan;
  launch.alloc = rt_.nodes;
  launch.command = cl->options.command;
  launch.env = std::move(env);
  launch.cwd = cwd;
  launch.master_port = port.ok() ? *port : 29500;
  const uint32_t id = step.id;
  steps_.emplace(id, std::move(step));
  conn.Send(EncodeJsonFrame(FrameType::kStepStart,
                            {{"step", id}, {"ntasks", plan->ntasks}}));
  for (size_t i = 0; i < plan->nodes.size(); ++i) {
    launch.step_node = i;
    const int node = plan->nodes[i].node;
    if (node == 0) {
      LaunchStepTasks(*local_, launch, NodeEnvironment(task_env_),
                      [&](uint32_t procid, const std::string& why) {
                        Route({id, procid, 2, "srun: " + why + "\n"});
                        TaskEnded(0, TaskEnd{id, procid, 1, 0});
                      });
    } else {
      hosts_[static_cast<size_t>(node)].conn->Send(
          EncodeJsonFrame(FrameType::kLaunch, StepLaunchToJson(launch)));
    }
  }
}

void BatchHead::OnClientFrame(int client, const Frame& f) {
  absl::StatusOr<Json> j = DecodeJson(f);
  if (!j.ok()) return ClientGone(client);
  if (f.type == FrameType::kRun) return StartStep(client, *j);
  if (f.type == FrameType::kSignal) {
    const int signal = j->value("signal", SIGTERM);
    for (auto& [id, s] : steps_) {
      if (s.client == client) SignalStep(s, signal);
    }
  }
}

void BatchHead::OnHostFrame(int node, const Frame& f) {
  if (f.type == FrameType::kOutput) {
    absl::StatusOr<OutputChunk> c = DecodeOutput(f.payload);
    if (c.ok()) Route(*std::move(c));
    return;
  }
  if (f.type == FrameType::kTaskExit) {
    absl::StatusOr<Json> j = DecodeJson(f);
    if (!j.ok()) return;
    TaskEnded(node, TaskEnd{j->value("step", 0u), j->value("procid", 0u),
                            j->value("exit_code", 1), j->value("signal", 0)});
  }
}

void BatchHead::Loop() {
  bool stop_sent = false;
  while (true) {
    if (g_head_signal != 0 && !stop_sent) {
      // Cancelled: the script gets the signal too (it shares the task's
      // process group); make sure, and stop the steps.
      stop_sent = true;
      ::kill(script_pid_, g_head_signal);
      for (auto& [id, s] : steps_) SignalStep(s, SIGTERM);
    }
    if (!script_done_) {
      int status = 0;
      if (::waitpid(script_pid_, &status, WNOHANG) == script_pid_) {
        script_done_ = true;
        script_status_ = status;
      }
    }
    if (script_done_) {
      ScriptOutput(&script_out_, 1);
      ScriptOutput(&script_err_, 2);
      return;
    }
    const int64_t now = MonotonicMs();
    for (auto& [id, s] : steps_) {
      if (s.kill_at_ms != 0 && now >= s.kill_at_ms) {
        s.kill_at_ms = 0;
        SignalStep(s, SIGKILL);
      }
    }
    std::vector<pollfd> fds;
    fds.push_back({srun_fd_, POLLIN, 0});
    if (script_out_ >= 0) fds.push_back({script_out_, POLLIN, 0});
    if (script_err_ >= 0) fds.push_back({script_err_, POLLIN, 0});
    const size_t conns_at = fds.size();
    std::vector<std::pair<bool, int>> who;  // (is_host, id) per conn fd
    for (size_t i = 1; i < hosts_.size(); ++i) {
      if (hosts_[i].conn == nullptr) continue;
      Conn& c = *hosts_[i].conn;
      fds.push_back(
          {c.fd(), static_cast<short>(POLLIN | (c.wants_write() ? POLLOUT : 0)),
           0});
      who.emplace_back(true, static_cast<int>(i));
    }
    for (const auto& [id, c] : clients_) {
      fds.push_back(
          {c->fd(),
           static_cast<short>(POLLIN | (c->wants_write() ? POLLOUT : 0)), 0});
      who.emplace_back(false, id);
    }
    const size_t runner_at = fds.size();
    local_->AddPollFds(fds);
    const int rc = ::poll(fds.data(), fds.size(), 100);
    if (rc < 0 && errno != EINTR) {
      Say(absl::StrCat("poll: ", std::strerror(errno)));
      return;
    }
    if (rc > 0) {
      for (size_t i = 1; i < conns_at; ++i) {
        if (fds[i].revents == 0) continue;
        if (fds[i].fd == script_out_) ScriptOutput(&script_out_, 1);
        if (fds[i].fd == script_err_) ScriptOutput(&script_err_, 2);
      }
      for (size_t k = 0; k < who.size(); ++k) {
        const pollfd& p = fds[conns_at + k];
        if (p.revents == 0) continue;
        const auto [is_host, id] = who[k];
        Conn* c = is_host
                      ? hosts_[static_cast<size_t>(id)].conn.get()
                      : (clients_.contains(id) ? clients_[id].get() : nullptr);
        if (c == nullptr) continue;
        bool alive = true;
        if (p.revents & POLLOUT) alive = c->Flush();
        if (alive && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
          alive = c->Fill();
        }
        // Frames that arrived, also those before an EOF.
        while (true) {
          absl::StatusOr<std::optional<Frame>> f = c->Next();
          if (!f.ok()) {
            alive = false;
            break;
          }
          if (!f->has_value()) break;
          if (is_host) {
            OnHostFrame(id, **f);
          } else {
            OnClientFrame(id, **f);
            if (!clients_.contains(id)) break;
          }
        }
        if (!alive) {
          if (is_host) {
            HostLost(id);
          } else if (clients_.contains(id)) {
            ClientGone(id);
          }
        }
      }
      std::vector<pollfd> runner_fds(fds.begin() + runner_at, fds.end());
      local_->OnPoll(runner_fds);
      if (fds[0].revents & POLLIN) {
        const int c = ::accept4(srun_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) clients_.emplace(next_client_++, std::make_unique<Conn>(c));
      }
    }
    local_->Reap();
  }
}

void BatchHead::Finish() {
  // Slurm ends a job's steps with its batch script; so does loom.
  local_->SignalAll(SIGKILL);
  for (size_t i = 1; i < hosts_.size(); ++i) {
    if (hosts_[i].conn == nullptr) continue;
    hosts_[i].conn->Send(EncodeFrame(FrameType::kExit, ""));
  }
  for (size_t i = 1; i < hosts_.size(); ++i) {
    if (hosts_[i].conn != nullptr) hosts_[i].conn->Drain(2000);
  }
  for (int k = 0; k < 20 && !local_->empty(); ++k) {
    local_->Reap();
    if (!local_->empty()) ::usleep(50'000);
  }
}

int BatchHead::Run() {
  struct sigaction sa {};
  sa.sa_handler = OnHeadSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  local_ = std::make_unique<StepRunner>(
      [this](OutputChunk c) { Route(std::move(c)); },
      [this](const TaskEnd& e) { TaskEnded(0, e); });
  for (auto step : {&BatchHead::AcceptHosts, &BatchHead::PrepareDir,
                    &BatchHead::OpenOutputs, &BatchHead::StartScript}) {
    if (absl::Status st = (this->*step)(); !st.ok()) {
      Say(std::string(st.message()));
      Finish();
      return 1;
    }
  }
  Loop();
  Finish();
  return ExitCodeOf(script_status_);
}

}  // namespace loom::batch
