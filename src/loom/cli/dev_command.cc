#include "loom/cli/dev_command.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "loom/common/atomic_file.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace loom {
namespace {

namespace fs = std::filesystem;

struct Child {
  std::string name;  // "server", "agent h200-0"
  std::string log;   // where its output goes
  pid_t pid = -1;
};

// Starts this binary with `args` in a process group of its own (so that a
// Ctrl-C reaches `loom dev` only, which then stops the children in order),
// its stdout and stderr appended to `log`.
absl::StatusOr<pid_t> SpawnSelf(const std::vector<std::string>& args,
                                const std::string& log) {
  std::vector<char*> argv;
  std::string self = "/proc/self/exe";
  argv.push_back(self.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null",
                                   O_RDONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, &attr,
                             argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start loom ", args[0], ": ", std::strerror(rc)));
  }
  return pid;
}

std::string ClusterYaml(const DevFlags& f) {
  std::string y =
      "# Written by `loom dev`: the local cluster its agents emulate.\n"
      "name: dev\npools:\n";
  if (f.h200_nodes > 0) {
    absl::StrAppend(&y, "  - {name: h200, nodes: ", f.h200_nodes,
                    ", gpu: {model: h200, count: 8, memory: 141Gi}, cpus: 192, "
                    "memory: 2Ti}\n");
  }
  if (f.a100_nodes > 0) {
    absl::StrAppend(&y, "  - {name: a100, nodes: ", f.a100_nodes,
                    ", gpu: {model: a100, count: 8, memory: 80Gi}, cpus: 96, "
                    "memory: 1Ti, mig: {gpus: 0, dynamic: true}}\n");
  }
  absl::StrAppend(&y,
                  "network: {nodes_per_leaf: 2, leaves_per_spine: 4}\n"
                  "projects:\n"
                  "  - {name: default, weight: 1}\n"
                  "  - {name: search, quota_gpus: 8, weight: 2}\n"
                  "  - {name: research, quota_gpus: 8, weight: 1}\n");
  return y;
}

// Nodes the server reports as up, or -1 when it does not answer.
int NodesUp(httplib::Client& client) {
  auto r = client.Get("/v1/nodes");
  if (!r || r->status != 200) return -1;
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (!j.is_object() || !j.contains("nodes") || !j["nodes"].is_array()) {
    return -1;
  }
  int up = 0;
  for (const auto& n : j["nodes"]) {
    if (n.is_object() && n.value("state", "") == "up") ++up;
  }
  return up;
}

// The first line of a file, or "" (missing or unreadable).
std::string ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

volatile sig_atomic_t g_stop = 0;
void OnStop(int) { g_stop = 1; }

// Sends SIGTERM to every child still running, waits up to 15 s, then
// SIGKILLs what is left.
void StopAll(std::vector<Child>& children) {
  for (const Child& c : children) {
    if (c.pid > 0) kill(c.pid, SIGTERM);
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(15);
  for (Child& c : children) {
    while (c.pid > 0) {
      if (waitpid(c.pid, nullptr, WNOHANG) != 0) {
        c.pid = -1;
      } else if (std::chrono::steady_clock::now() > deadline) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, nullptr, 0);
        c.pid = -1;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }
}

}  // namespace

CLI::App* AddDevCommand(CLI::App& app, DevFlags* f) {
  CLI::App* dev = app.add_subcommand(
      "dev",
      "Run a local cluster: a server on the embedded store and agents "
      "emulating 8-GPU nodes on loopback addresses");
  dev->add_option("--h200-nodes", f->h200_nodes,
                  "Emulated 8x H200 nodes (default 3)")
      ->check(CLI::Range(0, 200));
  dev->add_option("--a100-nodes", f->a100_nodes,
                  "Emulated 8x A100 nodes (default 1)")
      ->check(CLI::Range(0, 200));
  dev->add_option("--port", f->port,
                  "Server port on 127.0.0.1; agent i listens on "
                  "127.0.0.(2+i):(port+1+i) (default 7070)")
      ->check(CLI::Range(1, 65000));
  dev->add_option("--data-dir", f->data_dir,
                  "Where the cluster keeps its state; a second run on the same "
                  "directory picks up where the first stopped (default "
                  "./loom-dev)");
  dev->add_option("--policy", f->policy,
                  "Scheduling policy: fifo, backfill, las or fair (default)");
  dev->add_flag("--fake-tasks", f->fake_tasks,
                "Agents do not run tasks' commands (timed fake tasks)");
  return dev;
}

int RunDev(const DevFlags& f) {
  const int nodes = f.h200_nodes + f.a100_nodes;
  if (nodes == 0) {
    std::cerr << "loom dev: --h200-nodes and --a100-nodes are both 0\n";
    return 2;
  }
  if (f.port + nodes >= 65536) {
    std::cerr << "loom dev: --port " << f.port << " leaves no ports for "
              << nodes << " agents\n";
    return 2;
  }
  std::error_code ec;
  const fs::path dir = fs::absolute(f.data_dir, ec);
  fs::create_directories(dir / "agents", ec);
  if (ec) {
    std::cerr << "loom dev: --data-dir " << f.data_dir << ": " << ec.message()
              << "\n";
    return 2;
  }
  const std::string cluster = (dir / "cluster.yaml").string();
  {
    std::ofstream out(cluster, std::ios::trunc);
    out << ClusterYaml(f);
    if (!out) {
      std::cerr << "loom dev: cannot write " << cluster << "\n";
      return 1;
    }
  }

  signal(SIGINT, OnStop);
  signal(SIGTERM, OnStop);
  signal(SIGPIPE, SIG_IGN);
  std::vector<Child> children;
  const std::string url = absl::StrCat("http://127.0.0.1:", f.port);
  // The server writes the first admin token here (once: later starts on
  // this directory keep it); the agents join with a join token made below.
  const std::string admin_token = (dir / "admin.token").string();
  const std::string join_token = (dir / "join.token").string();
  auto start = [&](std::string name, std::vector<std::string> args,
                   std::string log) {
    absl::StatusOr<pid_t> pid = SpawnSelf(args, log);
    if (!pid.ok()) {
      std::cerr << "loom dev: " << pid.status().message() << "\n";
      return false;
    }
    children.push_back({std::move(name), std::move(log), *pid});
    return true;
  };
  // A child that has exited (reaped), or null while all run.
  auto exited = [&]() -> const Child* {
    for (Child& c : children) {
      int status = 0;
      if (c.pid > 0 && waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.pid = -1;
        return &c;
      }
    }
    return nullptr;
  };
  auto fail = [&](const std::string& why, const Child* c) {
    std::cerr << "loom dev: " << why;
    if (c != nullptr) std::cerr << " (its log: " << c->log << ")";
    std::cerr << "\n";
    StopAll(children);
    return 1;
  };

  if (!start("server",
             {"server", "--listen", absl::StrCat("127.0.0.1:", f.port),
              "--data-dir", (dir / "server").string(), "--cluster", cluster,
              "--policy", f.policy, "--heartbeat-timeout", "5",
              "--admin-token-file", admin_token},
             (dir / "server.log").string())) {
    return 1;
  }
  httplib::Client client(url);
  client.set_connection_timeout(1);
  client.set_read_timeout(5);
  for (int i = 0; i < 100 && NodesUp(client) < 0; ++i) {
    if (const Child* c = exited()) return fail("the server stopped", c);
    const std::string token = ReadLine(admin_token);
    if (!token.empty()) {
      client.set_default_headers({{"Authorization", "Bearer " + token}});
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (NodesUp(client) < 0) {
    return fail(absl::StrCat("the server does not answer at ", url, " (or ",
                             admin_token, " is not its admin token)"),
                &children[0]);
  }
  // The agents' names, to which their join token is bound (each joins once).
  std::vector<std::string> names;
  for (int i = 0; i < nodes; ++i) {
    names.push_back(i < f.h200_nodes ? absl::StrCat("h200-", i)
                                     : absl::StrCat("a100-", i - f.h200_nodes));
  }
  {
    auto r = client.Post(
        "/v1/tokens",
        nlohmann::json{{"role", "join"},
                       {"nodes", names},
                       {"description", "made by `loom dev` for its agents"}}
            .dump(),
        "application/json");
    nlohmann::json made =
        r ? nlohmann::json::parse(r->body, nullptr, false) : nlohmann::json();
    if (!r || r->status != 201 || !made.is_object() ||
        !made.contains("token") || !made["token"].is_string() ||
        !WriteSecretFile(join_token, made["token"].get<std::string>() + "\n")
             .ok()) {
      return fail("cannot make a join token for the agents", &children[0]);
    }
  }
  for (int i = 0; i < nodes; ++i) {
    const bool h200 = i < f.h200_nodes;
    const std::string& name = names[i];
    std::vector<std::string> args = {
        "agent",
        "--server",
        url,
        "--listen",
        absl::StrCat("127.0.0.", 2 + i, ":", f.port + 1 + i),
        "--name",
        name,
        "--data-dir",
        (dir / "agents" / name).string(),
        "--emulate",
        h200 ? "8xH200" : "8xA100",
        "--join-token-file",
        join_token};
    if (f.fake_tasks) args.push_back("--fake-tasks");
    if (!start("agent " + name, args,
               (dir / "agents" / (name + ".log")).string())) {
      return fail("cannot start the agents", nullptr);
    }
  }
  int up = 0;
  for (int i = 0; i < 150 && !g_stop; ++i) {
    if (const Child* c = exited()) {
      return fail(absl::StrCat(c->name, " stopped"), c);
    }
    up = NodesUp(client);
    if (up == nodes) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (up != nodes && !g_stop) {
    return fail(absl::StrCat(up, " of ", nodes, " nodes came up in 15 s"),
                nullptr);
  }
  std::cout
      << "loom dev: a local cluster is up: server " << url << ", "
      << f.h200_nodes << " x 8 H200 + " << f.a100_nodes
      << " x 8 A100 emulated nodes on 127.0.0.2-" << 1 + nodes
      << "; state and logs under " << dir.string() << "\n"
      << "  export LOOM_SERVER=" << url << "\n"
      << "  export LOOM_TOKEN_FILE=" << admin_token
      << "    # the admin token (docs/security.md)\n"
      << "  loom nodes; loom queue\n"
      << "  loom run -g 2 --wait -- sh -c 'echo GPUs $CUDA_VISIBLE_DEVICES'\n"
      << "Ctrl-C stops the cluster (running tasks go on; the next "
         "`loom dev` on this directory takes them over).\n"
      << std::flush;

  while (!g_stop) {
    if (const Child* c = exited()) {
      return fail(absl::StrCat(c->name, " stopped unexpectedly"), c);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::cout << "loom dev: stopping\n";
  StopAll(children);
  return 0;
}

}  // namespace loom
