#include "loom/agent/agent.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "httplib.h"
#include "loom/agent/agent_metrics.h"
#include "loom/agent/api_guard.h"
#include "loom/agent/checkpoint_dir.h"
#include "loom/agent/data_dir.h"
#include "loom/agent/fake_task_launcher.h"
#include "loom/agent/health_check.h"
#include "loom/agent/shim_task_launcher.h"
#include "loom/agent/task_files.h"
#include "loom/common/atomic_file.h"
#include "loom/common/digest.h"
#include "loom/common/units.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kMaxProcesses = 256;
// Leaves room for the ".p<k>" of the launcher ids of multi-process tasks
// (the launcher takes ids of up to 200 characters).
constexpr size_t kMaxTaskIdLength = 190;
constexpr size_t kMaxBodyBytes = size_t{1} << 20;
constexpr int kMaxGpuIndex = 1023;
constexpr absl::Duration kInitialBackoff = absl::Milliseconds(200);
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);
constexpr absl::Duration kDefaultHeartbeat = absl::Seconds(1);
constexpr absl::Duration kRollbackWait = absl::Seconds(10);
constexpr absl::Duration kFollowPoll = absl::Milliseconds(100);
// How soon a heartbeat follows the end of a task.
constexpr absl::Duration kReportDelay = absl::Milliseconds(20);

std::string Str(absl::string_view s) { return std::string(s.data(), s.size()); }

bool ValidTaskId(std::string_view id) {
  if (id.empty() || id.size() > kMaxTaskIdLength || id == "." || id == "..") {
    return false;
  }
  return std::all_of(id.begin(), id.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
           c == '_' || c == '-';
  });
}

bool ValidNodeName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  if (!absl::ascii_isalnum(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
           c == '_' || c == '-';
  });
}

// JSON text that never throws (invalid UTF-8 is replaced).
std::string Dump(const json& j, int indent = -1) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

std::optional<int64_t> AsInt(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev)
                           : absl::StrCat("signal ", sig);
}

std::string RfcTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

std::string HostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

bool IsWildcard(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr ==
           htonl(INADDR_ANY);
  }
  if (sa->sa_family == AF_INET6) {
    return IN6_IS_ADDR_UNSPECIFIED(
        &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
  }
  return false;
}

bool SameAddress(const sockaddr* a, const sockaddr* b) {
  if (a == nullptr || b == nullptr || a->sa_family != b->sa_family) {
    return false;
  }
  if (a->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  }
  if (a->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr,
                       sizeof(in6_addr)) == 0;
  }
  return false;
}

std::string AddressText(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf,
              sizeof(buf));
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr,
              buf, sizeof(buf));
  }
  return buf;
}

std::string DescribeHttpError(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "cannot connect";
    case httplib::Error::ConnectionTimeout:
      return "connection timed out";
    case httplib::Error::Read:
      return "no complete answer (read failed or timed out)";
    case httplib::Error::Write:
      return "sending the request failed";
    default:
      return absl::StrCat("request failed (", httplib::to_string(e), ")");
  }
}

absl::Status FieldError(std::string* out, const std::string& field,
                        const std::string& what) {
  if (out != nullptr) *out = field;
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

}  // namespace

absl::StatusOr<LaunchRequest> ParseLaunchRequest(const json& body,
                                                 std::string* field) {
  if (!body.is_object()) {
    return FieldError(
        field, "body",
        absl::StrCat("must be a JSON object, got ", body.type_name()));
  }
  auto find = [&](const char* key) -> const json* {
    auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  auto get_int = [&](const char* key, int64_t min, int64_t max,
                     int64_t* out) -> absl::Status {
    const json* v = find(key);
    if (v == nullptr) return absl::OkStatus();
    std::optional<int64_t> n = AsInt(*v);
    if (!n || *n < min || *n > max) {
      return FieldError(field, key,
                        absl::StrCat("must be a whole number from ", min,
                                     " to ", max, ", got ", Dump(*v)));
    }
    *out = *n;
    return absl::OkStatus();
  };
  auto no_nul = [](const std::string& s) {
    return s.find('\0') == std::string::npos;
  };
  LaunchRequest r;
  if (const json* v = find("node")) {
    if (!v->is_string() || !ValidNodeName(v->get<std::string>())) {
      return FieldError(field, "node", "must be a node name");
    }
    r.node = v->get<std::string>();
  }
  const json* id = find("task_id");
  if (id == nullptr) return FieldError(field, "task_id", "is required");
  if (!id->is_string() || !ValidTaskId(id->get<std::string>())) {
    return FieldError(
        field, "task_id",
        absl::StrCat("must be 1 to ", kMaxTaskIdLength,
                     " of [A-Za-z0-9._-] (not \".\" or \"..\"), got ",
                     Dump(*id)));
  }
  r.task_id = id->get<std::string>();
  if (const json* user = find("user")) {
    if (!user->is_string() || !no_nul(user->get<std::string>()) ||
        user->get<std::string>().size() > 256) {
      return FieldError(field, "user", "must be a user name");
    }
    r.user = user->get<std::string>();
  }
  if (absl::Status s = get_int("job_id", 0, INT64_MAX, &r.job_id); !s.ok()) {
    return s;
  }
  if (absl::Status s = get_int("task_index", 0, INT32_MAX, &r.task_index);
      !s.ok()) {
    return s;
  }
  const json* argv = find("argv");
  if (argv == nullptr) return FieldError(field, "argv", "is required");
  if (!argv->is_array() || argv->empty()) {
    return FieldError(field, "argv", "must be a non-empty list of strings");
  }
  for (size_t i = 0; i < argv->size(); ++i) {
    const json& a = (*argv)[i];
    if (!a.is_string() || !no_nul(a.get<std::string>())) {
      return FieldError(field, absl::StrCat("argv[", i, "]"),
                        "must be a string without NUL bytes");
    }
    r.argv.push_back(a.get<std::string>());
  }
  if (r.argv[0].empty()) {
    return FieldError(field, "argv[0]", "the program must not be empty");
  }
  if (const json* env = find("env")) {
    if (!env->is_object()) {
      return FieldError(field, "env", "must be an object of strings");
    }
    for (auto it = env->begin(); it != env->end(); ++it) {
      const std::string& key = it.key();
      if (key.empty() || key.find('=') != std::string::npos || !no_nul(key)) {
        return FieldError(field, absl::StrCat("env.", key),
                          "is not a valid variable name");
      }
      if (!it.value().is_string() || !no_nul(it.value().get<std::string>())) {
        return FieldError(
            field, absl::StrCat("env.", key),
            absl::StrCat("must be a string, got ", it.value().type_name()));
      }
      r.env[key] = it.value().get<std::string>();
    }
  }
  if (const json* wd = find("working_dir")) {
    if (!wd->is_string() || !no_nul(wd->get<std::string>())) {
      return FieldError(field, "working_dir", "must be a path");
    }
    r.working_dir = wd->get<std::string>();
  }
  if (const json* gpus = find("gpus")) {
    if (!gpus->is_array()) {
      return FieldError(field, "gpus", "must be a list of GPU indices");
    }
    std::set<int> seen;
    for (const json& g : *gpus) {
      std::optional<int64_t> n = AsInt(g);
      if (!n || *n < 0 || *n > kMaxGpuIndex) {
        return FieldError(field, "gpus",
                          absl::StrCat("must be GPU indices from 0 to ",
                                       kMaxGpuIndex, ", got ", Dump(g)));
      }
      if (!seen.insert(static_cast<int>(*n)).second) {
        return FieldError(field, "gpus",
                          absl::StrCat("GPU ", *n, " is listed twice"));
      }
      r.gpus.push_back(static_cast<int>(*n));
    }
  }
  int64_t processes = 1;
  if (absl::Status s = get_int("processes", 1, kMaxProcesses, &processes);
      !s.ok()) {
    return s;
  }
  r.processes = static_cast<int>(processes);
  if (find("rank_base") != nullptr) {
    int64_t rank_base = 0;
    if (absl::Status s = get_int(
            "rank_base", 0, int64_t{INT32_MAX} - kMaxProcesses, &rank_base);
        !s.ok()) {
      return s;
    }
    r.rank_base = rank_base;
  }
  if (const json* limits = find("limits")) {
    if (!limits->is_object()) {
      return FieldError(field, "limits",
                        "must be an object {memory_bytes, cpu_millis}");
    }
    for (const char* key : {"memory_bytes", "cpu_millis"}) {
      auto it = limits->find(key);
      if (it == limits->end() || it->is_null()) continue;
      std::optional<int64_t> n = AsInt(*it);
      if (!n || *n <= 0) {
        return FieldError(field, absl::StrCat("limits.", key),
                          "must be a positive whole number");
      }
      if (std::string(key) == "memory_bytes") {
        r.limits.memory_bytes = *n;
      } else {
        r.limits.cpu_millis = *n;
      }
    }
  }
  return r;
}

absl::StatusOr<std::string> NormalizeAgentServerUrl(std::string_view url) {
  std::string text = Str(
      absl::StripAsciiWhitespace(absl::string_view(url.data(), url.size())));
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--server '", std::string(url), "': ", why,
                     " (expected http://HOST:PORT)"));
  };
  if (text.empty()) return bad("empty URL");
  std::string scheme = "http";
  if (size_t pos = text.find("://"); pos != std::string::npos) {
    scheme = absl::AsciiStrToLower(text.substr(0, pos));
    text = text.substr(pos + 3);
  }
  if (scheme != "http" && scheme != "https") {
    return bad(absl::StrCat("unsupported scheme '", scheme, "'"));
  }
  while (!text.empty() && text.back() == '/') text.pop_back();
  if (text.empty()) return bad("no host");
  if (text.find_first_of("/?#@ ") != std::string::npos) {
    return bad("paths, queries and user names are not supported");
  }
  std::string host = text;
  std::string port;
  if (text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos) return bad("unclosed '['");
    host = text.substr(0, close + 1);
    std::string rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return bad("junk after ']'");
      port = rest.substr(1);
    }
  } else if (size_t colon = text.rfind(':'); colon != std::string::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string::npos) {
      return bad("write IPv6 addresses in brackets");
    }
  }
  if (host.empty() || host == "[]") return bad("no host");
  if (!port.empty() || text.back() == ':') {
    int p = 0;
    if (!absl::SimpleAtoi(port, &p) || p < 1 || p > 65535) {
      return bad(absl::StrCat("bad port '", port, "'"));
    }
  }
  return absl::StrCat(scheme, "://", text);
}

absl::StatusOr<ListenAddress> ParseListenAddress(std::string_view text_in) {
  const std::string text = Str(absl::StripAsciiWhitespace(
      absl::string_view(text_in.data(), text_in.size())));
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen '", text, "': ", why,
        " (expected HOST:PORT, e.g. 127.0.0.2:7100; port 0 picks one)"));
  };
  ListenAddress out;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() ||
        text[close + 1] != ':') {
      return bad("an IPv6 address needs the form [ADDRESS]:PORT");
    }
    out.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) return bad("no port");
    out.host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (out.host.find(':') != std::string::npos) {
      return bad("write IPv6 addresses in brackets");
    }
  }
  if (out.host.empty()) return bad("no host");
  if (!absl::SimpleAtoi(port, &out.port) || out.port < 0 || out.port > 65535) {
    return bad(absl::StrCat("bad port '", port, "'"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addrs = nullptr;
  if (int rc = getaddrinfo(out.host.c_str(), nullptr, &hints, &addrs);
      rc != 0) {
    return bad(
        absl::StrCat("cannot resolve '", out.host, "': ", gai_strerror(rc)));
  }
  ifaddrs* ifs = nullptr;
  const bool have_ifs = getifaddrs(&ifs) == 0;
  bool ok = false;
  bool wildcard = false;
  std::vector<std::string> seen;
  for (addrinfo* a = addrs; a != nullptr && !ok; a = a->ai_next) {
    seen.push_back(AddressText(a->ai_addr));
    if (IsWildcard(a->ai_addr)) {
      wildcard = true;
      continue;
    }
    if (IsLoopbackAddress(a->ai_addr)) {
      ok = true;
      break;
    }
    for (ifaddrs* i = have_ifs ? ifs : nullptr; i != nullptr; i = i->ifa_next) {
      if (SameAddress(a->ai_addr, i->ifa_addr)) {
        ok = true;
        break;
      }
    }
  }
  if (have_ifs) freeifaddrs(ifs);
  freeaddrinfo(addrs);
  if (ok) return out;
  if (wildcard) {
    return bad(
        "a wildcard address cannot be registered: name the address the "
        "server should call");
  }
  return bad(absl::StrCat("'", out.host, "' (", absl::StrJoin(seen, ", "),
                          ") is neither a loopback address nor an address "
                          "of this host"));
}

// ---------------------------------------------------------------------------
// The implementation.

class Agent::Impl {
 public:
  explicit Impl(AgentOptions options) : options_(std::move(options)) {}
  ~Impl() { Shutdown(); }

  absl::Status Init();
  absl::Status Start();
  void Shutdown();

  const std::string& address() const { return address_; }
  int port() const { return port_; }
  std::vector<std::string> node_names() const {
    std::vector<std::string> names;
    for (const auto& n : nodes_) names.push_back(n->name);
    return names;
  }
  bool Registered(const std::string& name) const {
    auto it = by_name_.find(name);
    return it != by_name_.end() && it->second->registered_flag.load();
  }

 private:
  // One process of a task.
  struct Proc {
    enum class State { kStarting, kRunning, kExited, kLost };
    std::string launcher_id;
    std::string stdout_path;
    std::string stderr_path;
    State state = State::kStarting;
    pid_t pid = 0;
    int exit_code = 0;  // kExited: 0..255, or -1 when killed by `term_signal`
    int term_signal = 0;
    absl::Time ended_at = absl::InfinitePast();
    std::string reason;

    bool ended() const {
      return state == State::kExited || state == State::kLost;
    }
    bool failed() const {
      return state == State::kLost ||
             (state == State::kExited && (exit_code != 0 || term_signal != 0));
    }
  };

  // A task as the server sees it: one or more processes.
  struct Unit {
    std::string task_id;
    int64_t job_id = 0;
    int64_t task_index = 0;
    std::vector<Proc> procs;
    std::vector<int> gpus;   // GPU indices (for metrics)
    bool launching = false;  // `LaunchUnit` in progress: not reported
    bool stopping = false;
    bool persisted = false;  // has a file in `units/`
    bool end_announced = false;
    // The process whose failure this agent learned of first: the cause
    // reported for the task (exit times have only whole seconds).
    std::optional<int> first_failure;
    std::optional<std::pair<int, absl::Duration>> stop_after_launch;
  };

  struct Summary {
    std::string state;  // running | exited | lost
    int exit_code = 0;
    int signal = 0;
    std::string reason;
  };

  struct Node {
    std::string name;
    std::string root;
    std::string tasks_dir;
    std::string units_dir;  // empty: multi-process tasks are not persisted
    std::string logs_dir;
    HostInfo host;
    std::vector<GpuDevice> gpus;
    bool emulated = false;
    std::unique_ptr<CgroupManager> cgroups;
    // A cgroup v2 group per task (task_group.h); null: process groups only.
    std::unique_ptr<TaskGroups> groups;
    std::unique_ptr<TaskLauncher> launcher;

    absl::Mutex mu;
    std::map<std::string, Unit> units ABSL_GUARDED_BY(mu);
    // launcher id -> (task id, process index)
    std::map<std::string, std::pair<std::string, int>> by_launcher_id
        ABSL_GUARDED_BY(mu);

    // The heartbeat schedule, guarded by `Impl::sched_mu_`.
    bool registered = false;
    absl::Time next_due = absl::InfinitePast();
    absl::Duration backoff = kInitialBackoff;
    absl::Duration interval = kDefaultHeartbeat;
    // A task ended since the last heartbeat was built: send the next one
    // soon rather than after a whole interval.
    bool report_pending = false;

    // Fencing (docs/fault-tolerance.md): the send time of the last
    // heartbeat (or registration) the server answered, and how long the
    // node may go without one before its tasks are killed (the server's
    // `fence_after_ms`; zero: never). Guarded by `Impl::sched_mu_`.
    absl::Time last_ack_sent = absl::InfinitePast();
    absl::Duration fence_after = absl::ZeroDuration();
    bool fenced = false;
    // The last write of the lease file failed (logged once, until one
    // succeeds again).
    std::atomic<bool> lease_write_failed{false};

    std::atomic<bool> registered_flag{false};
    // Injected faults (`POST /v1/faults`).
    std::atomic<bool> drop_heartbeats{false};
    std::atomic<uint32_t> failed_gpus{0};  // bit i: emulated GPU i failed
    // Used by the node's worker thread only.
    std::string last_problem;
    // This node's credential (a `node` token; "" until it joined), read
    // from and written to `<root>/credential`. Guarded by `Impl::sched_mu_`.
    std::string credential;
  };

  struct Worker {
    std::vector<Node*> nodes;
    std::vector<std::unique_ptr<httplib::Client>> clients;  // per server URL
    size_t preferred = 0;
    std::thread thread;
  };

  struct ServerReply {
    bool answered = false;
    int status = 0;
    json body;
    std::string text;
    std::string url;
    std::string error;  // when not answered
  };

  // Setup.
  absl::Status InitNode(Node& node, const HostInfo& host,
                        const std::vector<GpuDevice>* real_gpus);
  absl::Status RecoverNode(Node& node);
  void InstallRoutes();

  // Threads.
  void SuperviseLoop();
  void HealthLoop();
  // Kills the tasks of nodes that went `fence_after` without an answered
  // heartbeat.
  void FenceNodes();
  // `<node>/lease`: the send time of the last answered heartbeat and the
  // fence limit, for an agent that restarts (real tasks only).
  static std::string LeasePath(const Node& node) {
    return absl::StrCat(node.root, "/lease");
  }
  void WriteLease(Node& node, absl::Time sent, absl::Duration fence_after);
  // The node's health problems: the host's (last round) and its failed GPUs.
  json HealthJson(const Node& node) const;
  void WorkerLoop(Worker& worker);

  // Tasks.
  void PollNode(Node& node);
  std::string ApplyEvent(Node& node, const TaskEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(node.mu);
  void AfterChange(Node& node, Unit& unit, bool* report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(node.mu);
  void StopUnitLocked(Node& node, Unit& unit, int signal, absl::Duration grace)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(node.mu);
  void ForgetUnitLocked(Node& node, const std::string& task_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(node.mu);
  absl::StatusOr<json> LaunchUnit(Node& node, const LaunchRequest& request,
                                  std::string* field);
  bool RollBackLaunch(Node& node, const std::string& task_id);
  TaskSpec BuildSpec(const Node& node, const LaunchRequest& request,
                     const Proc& proc, int k, const UserAccount* account) const;
  // The account `r.user` runs as, or null for the agent's own user (when it
  // cannot switch users, or the request names none). `FailedPrecondition`
  // for a user the node does not have.
  absl::StatusOr<std::optional<UserAccount>> TaskUser(
      const Node& node, const LaunchRequest& r) const;
  void ReportSoon(Node& node);
  static Summary Summarize(const Unit& unit);
  json StatusJson(const Node& node, const Unit& unit, bool detailed) const;
  std::string UnitPath(const Node& node, const std::string& task_id) const {
    return absl::StrCat(node.units_dir, "/", task_id, ".json");
  }
  static std::string LogPath(const Node& node, const std::string& task_id,
                             int k, bool stderr_stream) {
    return absl::StrCat(node.logs_dir, "/", task_id,
                        k == 0 ? "" : absl::StrCat(".p", k),
                        stderr_stream ? ".err" : ".out");
  }

  // Server calls.
  void Tick(Worker& worker, Node& node);
  void Register(Worker& worker, Node& node);
  void Heartbeat(Worker& worker, Node& node);
  void ScheduleNext(Node& node, absl::Duration delay);
  void Backoff(Node& node);
  void Problem(Node& node, const std::string& message);
  ServerReply Post(Worker& worker, const std::string& path, const json& body,
                   const std::string& bearer = "");
  // Whether a request to the agent API carries a key of this agent's server
  // (docs/security.md); answers 401 and returns false otherwise.
  bool Authorized(const httplib::Request& req, httplib::Response& res);
  // Remembers the server's key for this agent (from a registration answer)
  // and keeps it in `<root>/agent_key`.
  void AcceptServerKey(Node& node, const std::string& key);
  static std::string ReplyMessage(const ServerReply& reply);
  void HandleServerReply(Node& node, const json& reply,
                         const std::vector<std::string>& reported_ended);
  json TaskStatuses(Node& node, std::vector<std::string>* ended_ids);
  json RegistrationBody(Node& node, std::vector<std::string>* ended_ids);

  // Agent API.
  void HandleLaunch(const httplib::Request& req, httplib::Response& res);
  void HandleList(const httplib::Request& req, httplib::Response& res);
  void HandleGet(const httplib::Request& req, httplib::Response& res);
  void HandleStop(const httplib::Request& req, httplib::Response& res);
  void HandleLogs(const httplib::Request& req, httplib::Response& res);
  void HandleFaults(const httplib::Request& req, httplib::Response& res);
  void HandleStats(const httplib::Request& req, httplib::Response& res);
  void HandleMetrics(const httplib::Request& req, httplib::Response& res);

  // Heartbeat round trips (answered ones) since the last stats reset, in
  // milliseconds, for `GET /v1/stats`; at most kMaxLatencySamples kept.
  static constexpr size_t kMaxLatencySamples = 1 << 20;
  absl::Mutex stats_mu_;
  std::vector<float> heartbeat_ms_ ABSL_GUARDED_BY(stats_mu_);
  int64_t heartbeats_failed_ ABSL_GUARDED_BY(stats_mu_) = 0;
  absl::Time stats_since_ ABSL_GUARDED_BY(stats_mu_) = absl::Now();
  absl::StatusOr<Node*> ResolveNode(const std::string& name) const;
  absl::StatusOr<Node*> NodeForTask(const std::string& name,
                                    const std::string& task_id) const;
  bool ProcEnded(Node& node, const std::string& task_id, int k);

  void Log(std::string_view level, std::string_view node,
           const std::string& message) const;

  // Constant after `Init`.
  AgentOptions options_;
  // Tasks run as the users their launches name (`run_as_user`, and root).
  bool switch_users_ = false;
  std::string address_;
  int port_ = 0;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::map<std::string, Node*> by_name_;
  std::unique_ptr<httplib::Server> server_;

  std::atomic<bool> started_{false};
  std::atomic<bool> stopping_{false};
  // Open `follow` log streams; each holds an API thread.
  std::atomic<int> follows_{0};
  std::atomic<bool> shut_down_{false};
  std::thread listen_thread_;
  std::thread supervise_thread_;
  std::thread health_thread_;
  // Finds real GPUs for health checks (null when emulated).
  std::unique_ptr<GpuProbe> owned_probe_;
  // Real GPUs: the last Xid of each (null when emulated or unavailable).
  std::unique_ptr<NvmlXidWatcher> xid_watcher_;
  GpuProbe* probe_ = nullptr;
  int expected_gpus_ = 0;
  mutable absl::Mutex health_mu_;
  std::vector<std::string> host_problems_ ABSL_GUARDED_BY(health_mu_);
  // Injected delay of every agent API answer but `/v1/faults` (slow agent).
  std::atomic<int64_t> api_delay_ms_{0};
  // Who may call the API (the server's keys; `--insecure`).
  ApiGuard guard_{options_.insecure};
  std::vector<std::unique_ptr<Worker>> workers_;

  mutable absl::Mutex sched_mu_;
  absl::CondVar sched_cv_;
  mutable absl::Mutex log_mu_;
};

void Agent::Impl::Log(std::string_view level, std::string_view node,
                      const std::string& message) const {
  std::string line =
      absl::StrCat(RfcTime(absl::Now()), " level=", std::string(level));
  if (!node.empty()) absl::StrAppend(&line, " node=", std::string(node));
  absl::StrAppend(&line, " msg=", Quote(message));
  if (options_.log) {
    options_.log(line);
    return;
  }
  absl::MutexLock lock(&log_mu_);
  std::fprintf(stderr, "%s\n", line.c_str());
}

absl::Status Agent::Impl::Init() {
  if (options_.server_urls.empty()) {
    return absl::InvalidArgumentError("no server URL (--server)");
  }
  for (std::string& url : options_.server_urls) {
    absl::StatusOr<std::string> normal = NormalizeAgentServerUrl(url);
    if (!normal.ok()) return normal.status();
    url = *normal;
  }
  if (options_.node_names.empty()) {
    return absl::InvalidArgumentError("no node name");
  }
  std::set<std::string> unique;
  for (const std::string& name : options_.node_names) {
    if (!ValidNodeName(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node name '", name,
          "' is invalid: use letters, digits, '-', '_' and '.', starting "
          "with a letter or digit"));
    }
    if (!unique.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("node name '", name, "' is given twice"));
    }
  }
  if (options_.node_names.size() > 1) options_.fleet = true;
  if (options_.fleet && !options_.emulation) {
    return absl::InvalidArgumentError(
        "the fleet emulator (--emulate-nodes) needs emulated GPUs "
        "(--emulate COUNTxMODEL)");
  }
  if (options_.data_dir.empty()) {
    return absl::InvalidArgumentError("no data directory (--data-dir)");
  }
  if (absl::Status s =
          CheckInsecureListen(options_.insecure, options_.listen_host);
      !s.ok()) {
    return s;
  }
  if (!options_.now) options_.now = [] { return absl::Now(); };
  if (options_.stop_signal <= 0 || options_.stop_signal >= NSIG) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid stop signal ", options_.stop_signal));
  }
  if (options_.stop_grace < absl::ZeroDuration() ||
      options_.heartbeat_interval < absl::ZeroDuration() ||
      options_.poll_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("durations must not be negative");
  }
  options_.http_threads = std::clamp(options_.http_threads, 2, 256);

  HostInfo host;
  if (options_.host) {
    host = *options_.host;
  } else {
    absl::StatusOr<HostInfo> probed = ProbeHost();
    if (!probed.ok()) return probed.status();
    host = *probed;
  }
  std::vector<GpuDevice> real_gpus;
  if (!options_.emulation) {
    NvmlGpuProbe nvml(options_.nvml_library);
    GpuProbe* probe =
        options_.gpu_probe != nullptr ? options_.gpu_probe : &nvml;
    absl::StatusOr<std::vector<GpuDevice>> gpus = probe->Probe();
    if (!gpus.ok()) {
      return absl::Status(
          gpus.status().code(),
          absl::StrCat("GPU discovery failed: ", Str(gpus.status().message()),
                       ". To run without GPUs, emulate them: --emulate "
                       "8xH200 (or 8xA100, COUNTxMODEL[:MEMORY])"));
    }
    real_gpus = std::move(*gpus);
    if (options_.gpu_probe == nullptr) {
      owned_probe_ = std::make_unique<NvmlGpuProbe>(options_.nvml_library);
      probe_ = owned_probe_.get();
    } else {
      probe_ = options_.gpu_probe;
    }
    expected_gpus_ = static_cast<int>(real_gpus.size());
    xid_watcher_ = std::make_unique<NvmlXidWatcher>(options_.nvml_library);
    if (absl::Status st = xid_watcher_->Start(); !st.ok()) {
      Log("warn", "",
          absl::StrCat("Xid errors are not watched: ", Str(st.message())));
      xid_watcher_.reset();
    }
    if (real_gpus.empty()) {
      Log("warn", "", "NVML found no GPUs on this host");
    }
  }

  if (options_.run_as_user && !options_.fake_tasks) {
    switch_users_ = options_.can_switch_users.value_or(::geteuid() == 0);
    if (!options_.lookup_user) options_.lookup_user = LookUpSystemUser;
    if (!switch_users_) {
      Log("info", "",
          absl::StrCat("not running as root: tasks run as uid ", ::geteuid(),
                       ", not as the users who submit them"));
    }
  }

  if (absl::Status s = EnsureDirectory(options_.data_dir, kAgentDirMode);
      !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("--data-dir: ", Str(s.message())));
  }
  for (const std::string& name : options_.node_names) {
    auto node = std::make_unique<Node>();
    node->name = name;
    if (absl::Status s =
            InitNode(*node, host, options_.emulation ? nullptr : &real_gpus);
        !s.ok()) {
      return s;
    }
    by_name_[name] = node.get();
    nodes_.push_back(std::move(node));
  }
  if (!guard_.HasKey()) Log("info", "", guard_.Describe());

  server_ = std::make_unique<httplib::Server>();
  const size_t threads = static_cast<size_t>(options_.http_threads);
  server_->new_task_queue = [threads] {
    return new httplib::ThreadPool(threads);
  };
  server_->set_payload_max_length(kMaxBodyBytes);
  server_->set_tcp_nodelay(true);
  // A connection holds a pool thread while it is open, idle keep-alive
  // included: keep idle ones short so that launches never wait long.
  server_->set_keep_alive_max_count(100);
  server_->set_keep_alive_timeout(2);
  server_->set_read_timeout(10);
  server_->set_write_timeout(10);
  InstallRoutes();
  int port = options_.listen_port;
  if (port == 0) {
    port = server_->bind_to_any_port(options_.listen_host);
  } else if (!server_->bind_to_port(options_.listen_host, port)) {
    port = -1;
  }
  if (port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ",
                     HostPort(options_.listen_host, options_.listen_port),
                     " (address in use, or not an address of this host)"));
  }
  port_ = port;
  address_ = HostPort(options_.listen_host, port_);
  return absl::OkStatus();
}

absl::Status Agent::Impl::InitNode(Node& node, const HostInfo& host,
                                   const std::vector<GpuDevice>* real_gpus) {
  node.root = options_.fleet
                  ? absl::StrCat(options_.data_dir, "/nodes/", node.name)
                  : options_.data_dir;
  node.tasks_dir = absl::StrCat(node.root, "/tasks");
  {
    std::ifstream cred(absl::StrCat(node.root, "/credential"));
    std::string line;
    if (cred && std::getline(cred, line) && !line.empty()) {
      absl::MutexLock lock(&sched_mu_);
      node.credential = line;
    }
    std::ifstream key(absl::StrCat(node.root, "/agent_key"));
    if (key && std::getline(key, line) && !line.empty()) {
      guard_.SetKey(node.name, line);
    }
    if (!node.credential.empty() || !options_.join_token.empty()) {
      guard_.SetCanRegister(true);
    }
  }
  node.units_dir = options_.fake_tasks ? "" : absl::StrCat(node.root, "/units");
  node.logs_dir = absl::StrCat(node.root, "/logs");
  // Modes: data_dir.h.
  const std::pair<std::string, mode_t> dirs[] = {
      {options_.fleet ? absl::StrCat(options_.data_dir, "/nodes") : "",
       kAgentDirMode},
      {node.root, kAgentDirMode},
      {node.tasks_dir, kPrivateDirMode},
      {node.units_dir, kPrivateDirMode},
      {node.logs_dir, kPrivateDirMode}};
  for (const auto& [dir, mode] : dirs) {
    if (dir.empty()) continue;
    if (absl::Status s = EnsureDirectory(dir, mode); !s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("node ", node.name, ": ", Str(s.message())));
    }
  }
  node.host = host;
  if (options_.emulation) {
    const GpuEmulation& e = *options_.emulation;
    EmulatedGpuProbe probe(e, node.name);
    node.gpus = probe.Probe().value();
    node.emulated = true;
    if (e.cpus > 0) node.host.cpus = e.cpus;
    if (e.memory_bytes > 0) node.host.memory_bytes = e.memory_bytes;
  } else {
    node.gpus = *real_gpus;
  }

  if (options_.launcher_factory) {
    absl::StatusOr<std::unique_ptr<TaskLauncher>> launcher =
        options_.launcher_factory(node.name, node.tasks_dir);
    if (!launcher.ok()) return launcher.status();
    node.launcher = std::move(*launcher);
  } else if (options_.fake_tasks) {
    FakeTaskLauncherOptions fake;
    fake.now = options_.now;
    node.launcher = std::make_unique<FakeTaskLauncher>(std::move(fake));
  } else {
    if (options_.use_cgroups) {
      node.cgroups = std::make_unique<CgroupV1Manager>();
      auto groups = TaskGroups::Create(node.tasks_dir);
      if (groups.ok()) node.groups = *std::move(groups);
      if (!groups.ok()) Log("info", node.name, NoGroupsNote(groups.status()));
    }
    ShimTaskLauncherOptions shim;
    shim.state_dir = node.tasks_dir;
    shim.cgroups = node.cgroups.get();
    shim.groups = node.groups.get();
    shim.now = options_.now;
    shim.lease_path = LeasePath(node);
    absl::StatusOr<std::unique_ptr<ShimTaskLauncher>> launcher =
        ShimTaskLauncher::Create(std::move(shim));
    if (!launcher.ok()) return launcher.status();
    node.launcher = std::move(*launcher);
  }
  return RecoverNode(node);
}

absl::Status Agent::Impl::RecoverNode(Node& node) {
  absl::StatusOr<std::vector<TaskInfo>> infos = node.launcher->Recover();
  if (!infos.ok()) {
    return absl::Status(infos.status().code(),
                        absl::StrCat("node ", node.name, ": recover tasks: ",
                                     Str(infos.status().message())));
  }
  std::map<std::string, const TaskInfo*> by_id;
  for (const TaskInfo& info : *infos) by_id[info.task_id] = &info;
  auto from_info = [](const TaskInfo& info) {
    Proc p;
    p.launcher_id = info.task_id;
    p.stdout_path = info.stdout_path;
    p.stderr_path = info.stderr_path;
    p.pid = info.pid;
    switch (info.state) {
      case TaskInfo::State::kRunning:
        p.state = Proc::State::kRunning;
        break;
      case TaskInfo::State::kExited:
        p.state = Proc::State::kExited;
        break;
      case TaskInfo::State::kLost:
        p.state = Proc::State::kLost;
        break;
    }
    p.exit_code = info.exit_code;
    p.term_signal = info.term_signal;
    p.ended_at = info.ended_at;
    p.reason = info.reason;
    return p;
  };

  std::vector<Unit> units;
  std::set<std::string> claimed;
  if (!node.units_dir.empty()) {
    std::error_code ec;
    std::vector<std::string> files;
    for (fs::directory_iterator it(node.units_dir, ec), end; !ec && it != end;
         it.increment(ec)) {
      const std::string file = it->path().filename().string();
      if (absl::EndsWith(file, ".json")) files.push_back(it->path().string());
    }
    std::sort(files.begin(), files.end());
    for (const std::string& path : files) {
      absl::StatusOr<std::string> text = agent_internal::ReadWholeFile(path);
      json m = text.ok() ? json::parse(*text, nullptr, false) : json();
      Unit unit;
      bool ok = m.is_object() && m.contains("task_id") &&
                m["task_id"].is_string() &&
                ValidTaskId(m["task_id"].get<std::string>()) &&
                m.contains("processes") && m["processes"].is_array() &&
                !m["processes"].empty();
      if (ok) {
        unit.task_id = m["task_id"].get<std::string>();
        unit.job_id = AsInt(m.value("job_id", json(0))).value_or(0);
        unit.task_index = AsInt(m.value("task_index", json(0))).value_or(0);
        if (m.contains("gpus") && m["gpus"].is_array()) {
          for (const json& g : m["gpus"]) {
            if (std::optional<int64_t> i = AsInt(g); i && *i >= 0 && *i < 64) {
              unit.gpus.push_back(static_cast<int>(*i));
            }
          }
        }
        unit.persisted = true;
        for (const json& p : m["processes"]) {
          if (!p.is_object() || !p.contains("launcher_id") ||
              !p["launcher_id"].is_string()) {
            ok = false;
            break;
          }
          const std::string lid = p["launcher_id"].get<std::string>();
          Proc proc;
          if (auto found = by_id.find(lid); found != by_id.end()) {
            proc = from_info(*found->second);
            claimed.insert(lid);
          } else {
            proc.launcher_id = lid;
            proc.state = Proc::State::kLost;
            proc.reason = "the agent stopped before this process was started";
          }
          if (p.contains("stdout") && p["stdout"].is_string()) {
            proc.stdout_path = p["stdout"].get<std::string>();
          }
          if (p.contains("stderr") && p["stderr"].is_string()) {
            proc.stderr_path = p["stderr"].get<std::string>();
          }
          unit.procs.push_back(std::move(proc));
        }
      }
      if (!ok) {
        Log("warn", node.name,
            absl::StrCat("ignoring unreadable task file ", path,
                         " (renamed to .bad); its processes are reported "
                         "one by one"));
        std::error_code rename_ec;
        fs::rename(path, path + ".bad", rename_ec);
        for (const Proc& p : unit.procs) claimed.erase(p.launcher_id);
        continue;
      }
      units.push_back(std::move(unit));
    }
  }
  for (const TaskInfo& info : *infos) {
    if (claimed.contains(info.task_id)) continue;
    Unit unit;
    unit.task_id = info.task_id;
    // A one-process task has no unit file: its job is the first part of
    // the task id, its GPUs are in its environment.
    int64_t job = 0;
    if (absl::SimpleAtoi(info.task_id.substr(0, info.task_id.find('.')),
                         &job)) {
      unit.job_id = job;
    }
    if (info.state == TaskInfo::State::kRunning && info.pid > 0) {
      unit.gpus = VisibleGpusOf(info.pid);
    }
    unit.procs.push_back(from_info(info));
    units.push_back(std::move(unit));
  }

  int running = 0;
  bool report = false;
  absl::MutexLock lock(&node.mu);
  for (Unit& unit : units) {
    const std::string id = unit.task_id;
    if (node.units.contains(id)) {
      Log("warn", node.name,
          absl::StrCat("task ", id, " is recorded twice; keeping the first"));
      continue;
    }
    for (size_t k = 0; k < unit.procs.size(); ++k) {
      node.by_launcher_id[unit.procs[k].launcher_id] = {id,
                                                        static_cast<int>(k)};
    }
    Unit& stored = node.units.emplace(id, std::move(unit)).first->second;
    AfterChange(node, stored, &report);
    if (Summarize(stored).state == "running") ++running;
  }
  if (!node.units.empty()) {
    Log("info", node.name,
        absl::StrCat("recovered ", node.units.size(), " tasks (", running,
                     " running, ", node.units.size() - running,
                     " ended and not yet acknowledged)"));
  }
  // The lease of the agent before this one: when its last answered
  // heartbeat is older than the fence limit, the server may already run
  // these tasks' jobs elsewhere, and `Start` fences them before anything
  // registers.
  absl::StatusOr<std::string> lease =
      agent_internal::ReadWholeFile(LeasePath(node));
  if (lease.ok()) {
    const json l = json::parse(*lease, nullptr, false);
    std::optional<int64_t> sent =
        l.is_object() ? AsInt(l.value("last_ack_sent_ms", json()))
                      : std::nullopt;
    std::optional<int64_t> fence =
        l.is_object() ? AsInt(l.value("fence_after_ms", json())) : std::nullopt;
    if (sent && fence && *fence > 0) {
      absl::MutexLock sched_lock(&sched_mu_);
      node.last_ack_sent = absl::FromUnixMillis(*sent);
      node.fence_after = absl::Milliseconds(*fence);
    }
  }
  return absl::OkStatus();
}

void Agent::Impl::WriteLease(Node& node, absl::Time sent,
                             absl::Duration fence_after) {
  // Not synced: after a crash of the machine its tasks are gone anyway.
  const std::string path = LeasePath(node);
  const std::string tmp = path + ".tmp";
  const std::string text =
      Dump(json{{"last_ack_sent_ms", absl::ToUnixMillis(sent)},
                {"fence_after_ms", absl::ToInt64Milliseconds(fence_after)}});
  const char* step = "open";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                      kPrivateFileMode);
  bool ok = fd >= 0;
  if (ok) {
    step = "write";
    const ssize_t n = write(fd, text.data(), text.size());
    ok = n == static_cast<ssize_t>(text.size());
    const int err = n < 0 ? errno : EIO;  // EIO: a short write
    close(fd);
    errno = err;
  }
  if (ok) {
    step = "rename";
    ok = rename(tmp.c_str(), path.c_str()) == 0;
  }
  // A stale lease fences nothing while this agent runs (it fences its own
  // tasks), but if it dies the shims go by the lease: say so once.
  if (!ok && !node.lease_write_failed.exchange(true)) {
    Log("warn", node.name,
        absl::StrCat("cannot write the lease ", path, " (", step, ": ",
                     std::strerror(errno),
                     "); should this agent die, its tasks' shims will fence "
                     "them from the last lease written"));
  } else if (ok && node.lease_write_failed.exchange(false)) {
    Log("info", node.name,
        absl::StrCat("the lease ", path, " is written again"));
  }
}

absl::Status Agent::Impl::Start() {
  if (started_.exchange(true)) {
    return absl::FailedPreconditionError("the agent was already started");
  }
  // Tasks recovered from an agent that was gone too long are fenced before
  // any registration could re-adopt them.
  FenceNodes();
  listen_thread_ = std::thread([this] { server_->listen_after_bind(); });
  const size_t n = nodes_.size();
  size_t k = options_.heartbeat_threads > 0
                 ? static_cast<size_t>(options_.heartbeat_threads)
                 : std::min<size_t>(n, 8);
  k = std::clamp<size_t>(k, 1, n);
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&sched_mu_);
    for (size_t i = 0; i < n; ++i) {
      // Spread the first registrations of a fleet over a second.
      nodes_[i]->next_due = now + absl::Milliseconds(1000) *
                                      static_cast<double>(i) /
                                      static_cast<double>(n);
    }
  }
  for (size_t w = 0; w < k; ++w) {
    auto worker = std::make_unique<Worker>();
    for (size_t i = w; i < n; i += k) worker->nodes.push_back(nodes_[i].get());
    for (const std::string& url : options_.server_urls) {
      auto client = std::make_unique<httplib::Client>(url);
      const int64_t connect_us =
          absl::ToInt64Microseconds(options_.connect_timeout);
      const int64_t request_us =
          absl::ToInt64Microseconds(options_.request_timeout);
      client->set_connection_timeout(connect_us / 1000000,
                                     connect_us % 1000000);
      client->set_read_timeout(request_us / 1000000, request_us % 1000000);
      client->set_write_timeout(request_us / 1000000, request_us % 1000000);
      client->set_keep_alive(true);
      if (!options_.ca_cert.empty()) {
        client->set_ca_cert_path(options_.ca_cert.c_str());
      }
      client->enable_server_certificate_verification(true);
      // httplib writes headers and body separately: without NODELAY, Nagle
      // and delayed ACKs stall every request by ~40 ms.
      client->set_tcp_nodelay(true);
      worker->clients.push_back(std::move(client));
    }
    workers_.push_back(std::move(worker));
  }
  for (auto& worker : workers_) {
    Worker* w = worker.get();
    w->thread = std::thread([this, w] { WorkerLoop(*w); });
  }
  supervise_thread_ = std::thread([this] { SuperviseLoop(); });
  if (options_.health_interval > absl::ZeroDuration()) {
    health_thread_ = std::thread([this] { HealthLoop(); });
  }
  Log("info", "",
      absl::StrCat(
          "agent listening on ", address_, "; ", n,
          n == 1 ? " node (" : " nodes (", nodes_.front()->name,
          n > 1 ? absl::StrCat(" .. ", nodes_.back()->name) : "", "); ",
          nodes_.front()->gpus.size(), " ",
          nodes_.front()->gpus.empty()
              ? "GPUs"
              : absl::StrCat(nodes_.front()->gpus.front().model, " GPUs"),
          options_.emulation ? " (emulated)" : "",
          options_.fake_tasks ? "; fake tasks" : "", "; servers ",
          absl::StrJoin(options_.server_urls, ",")));
  return absl::OkStatus();
}

void Agent::Impl::Shutdown() {
  if (shut_down_.exchange(true)) return;
  stopping_.store(true);
  {
    absl::MutexLock lock(&sched_mu_);
    sched_cv_.SignalAll();
  }
  for (auto& worker : workers_) {
    for (auto& client : worker->clients) client->stop();
  }
  if (server_ != nullptr && port_ > 0) {
    // `stop` only acts on a running server; a bound listener that was never
    // served is served now so that its socket gets closed.
    if (!listen_thread_.joinable()) {
      listen_thread_ = std::thread([this] { server_->listen_after_bind(); });
    }
    for (int i = 0; i < 400 && !server_->is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    server_->stop();
  }
  if (listen_thread_.joinable()) listen_thread_.join();
  if (!started_.load()) return;
  for (auto& worker : workers_) {
    if (worker->thread.joinable()) worker->thread.join();
  }
  if (supervise_thread_.joinable()) supervise_thread_.join();
  if (health_thread_.joinable()) health_thread_.join();
  Log("info", "", "agent stopped; tasks keep running");
}

// ---------------------------------------------------------------------------
// Supervision.

void Agent::Impl::SuperviseLoop() {
  while (!stopping_.load()) {
    for (auto& node : nodes_) PollNode(*node);
    FenceNodes();
    absl::MutexLock lock(&sched_mu_);
    if (stopping_.load()) break;
    sched_cv_.WaitWithTimeout(&sched_mu_, options_.poll_interval);
  }
}

void Agent::Impl::FenceNodes() {
  const absl::Time now = absl::Now();
  for (auto& node : nodes_) {
    absl::Duration silent;
    {
      absl::MutexLock lock(&sched_mu_);
      if (node->fenced || node->fence_after <= absl::ZeroDuration() ||
          node->last_ack_sent == absl::InfinitePast() ||
          now - node->last_ack_sent <= node->fence_after) {
        continue;
      }
      node->fenced = true;
      silent = now - node->last_ack_sent;
    }
    // The server declares this node down soon (its heartbeat timeout is
    // longer than `fence_after`) and runs the node's jobs elsewhere: kill
    // the tasks first, so that no job runs twice.
    int killed = 0;
    {
      absl::MutexLock lock(&node->mu);
      for (auto& [id, unit] : node->units) {
        if (unit.launching) {
          unit.stop_after_launch =
              std::make_pair(SIGKILL, absl::ZeroDuration());
          ++killed;
          continue;
        }
        if (Summarize(unit).state != "running") continue;
        StopUnitLocked(*node, unit, SIGKILL, absl::ZeroDuration());
        ++killed;
      }
    }
    Log("warn", node->name,
        absl::StrCat("fenced: no heartbeat answered for ",
                     FormatDurationShort(silent), " (limit ",
                     FormatDurationShort(node->fence_after), "); killed ",
                     killed, " task(s) so that no job runs twice"));
  }
}

void Agent::Impl::HealthLoop() {
  std::vector<std::string> last;
  while (!stopping_.load()) {
    std::vector<std::string> problems =
        CheckDataDir(options_.data_dir, options_.min_free_disk_bytes);
    if (!options_.health_command.empty()) {
      absl::Status st =
          RunHealthCommand(options_.health_command, options_.health_timeout);
      if (!st.ok()) problems.push_back(Str(st.message()));
    }
    if (probe_ != nullptr) {
      for (std::string& p : CheckGpus(*probe_, expected_gpus_)) {
        problems.push_back(std::move(p));
      }
    }
    if (xid_watcher_ != nullptr) {
      for (const auto& [gpu, xid] : xid_watcher_->LastXids()) {
        if (IsHardwareXid(xid)) {
          problems.push_back(
              absl::StrCat("GPU ", gpu, ": Xid ", xid, " (a hardware error)"));
        }
      }
    }
    if (problems != last) {
      Log(problems.empty() ? "info" : "warn", "",
          problems.empty() ? std::string("health checks pass")
                           : absl::StrCat("health checks fail: ",
                                          absl::StrJoin(problems, "; ")));
      {
        absl::MutexLock lock(&health_mu_);
        host_problems_ = problems;
      }
      for (auto& node : nodes_) ReportSoon(*node);
      last = std::move(problems);
    }
    // `sched_cv_` is signalled for other reasons too: wait out the round.
    const absl::Time next = absl::Now() + options_.health_interval;
    absl::MutexLock lock(&sched_mu_);
    while (!stopping_.load() && absl::Now() < next) {
      sched_cv_.WaitWithDeadline(&sched_mu_, next);
    }
  }
}

json Agent::Impl::HealthJson(const Node& node) const {
  json problems = json::array();
  {
    absl::MutexLock lock(&health_mu_);
    for (const std::string& p : host_problems_) problems.push_back(p);
  }
  const uint32_t failed = node.failed_gpus.load();
  for (const GpuDevice& gpu : node.gpus) {
    if (gpu.index < 32 && (failed & (1u << gpu.index)) != 0) {
      problems.push_back(absl::StrCat("GPU ", gpu.index, " (", gpu.uuid,
                                      ") failed (injected fault)"));
    }
  }
  return {{"ok", problems.empty()}, {"problems", std::move(problems)}};
}

void Agent::Impl::PollNode(Node& node) {
  std::vector<TaskEvent> events = node.launcher->Poll();
  if (events.empty()) return;
  bool report = false;
  {
    absl::MutexLock lock(&node.mu);
    std::set<std::string> touched;
    for (const TaskEvent& event : events) {
      std::string id = ApplyEvent(node, event);
      if (!id.empty()) touched.insert(std::move(id));
    }
    for (const std::string& id : touched) {
      auto it = node.units.find(id);
      if (it != node.units.end()) AfterChange(node, it->second, &report);
    }
  }
  if (report) ReportSoon(node);
}

std::string Agent::Impl::ApplyEvent(Node& node, const TaskEvent& event) {
  auto it = node.by_launcher_id.find(event.task_id);
  if (it == node.by_launcher_id.end()) {
    Log("warn", node.name,
        absl::StrCat("process ", event.task_id,
                     " ended but belongs to no known task"));
    return "";
  }
  auto unit = node.units.find(it->second.first);
  if (unit == node.units.end() ||
      it->second.second >= static_cast<int>(unit->second.procs.size())) {
    return "";
  }
  Proc& p = unit->second.procs[it->second.second];
  p.state = event.kind == TaskEvent::Kind::kExited ? Proc::State::kExited
                                                   : Proc::State::kLost;
  p.exit_code = event.exit_code;
  p.term_signal = event.term_signal;
  p.ended_at = event.ended_at;
  p.reason = event.reason;
  if (p.failed() && !unit->second.first_failure) {
    unit->second.first_failure = it->second.second;
  }
  return it->second.first;
}

// After a process of `unit` changed: announces the end of the task, or
// stops the other processes when one failed (a distributed job whose rank
// died does not finish).
void Agent::Impl::AfterChange(Node& node, Unit& unit, bool* report) {
  if (unit.launching) return;
  const Summary s = Summarize(unit);
  if (s.state != "running") {
    if (!unit.end_announced) {
      unit.end_announced = true;
      *report = true;
      std::string how =
          s.state == "lost"
              ? absl::StrCat("lost: ", s.reason)
              : (s.signal != 0
                     ? absl::StrCat("killed by ", SignalName(s.signal))
                     : absl::StrCat("exited with code ", s.exit_code));
      if (s.state != "lost" && !s.reason.empty()) {
        absl::StrAppend(&how, " (", s.reason, ")");
      }
      Log("info", node.name, absl::StrCat("task ", unit.task_id, " ", how));
    }
    return;
  }
  if (unit.stopping) return;
  for (size_t k = 0; k < unit.procs.size(); ++k) {
    const Proc& p = unit.procs[k];
    if (!p.failed()) continue;
    Log("info", node.name,
        absl::StrCat(
            "task ", unit.task_id, ": process ", k,
            p.state == Proc::State::kLost
                ? absl::StrCat(" was lost (", p.reason, ")")
                : (p.term_signal != 0
                       ? absl::StrCat(" was killed by ",
                                      SignalName(p.term_signal))
                       : absl::StrCat(" exited with code ", p.exit_code)),
            "; stopping the other processes"));
    StopUnitLocked(node, unit, options_.stop_signal, options_.stop_grace);
    return;
  }
}

void Agent::Impl::StopUnitLocked(Node& node, Unit& unit, int signal,
                                 absl::Duration grace) {
  for (const Proc& p : unit.procs) {
    if (p.state != Proc::State::kRunning) continue;
    absl::Status s = node.launcher->Stop(p.launcher_id, signal, grace);
    if (!s.ok()) {
      Log("warn", node.name,
          absl::StrCat("task ", unit.task_id, ": stop ", p.launcher_id, ": ",
                       Str(s.message())));
    }
  }
  unit.stopping = true;
}

void Agent::Impl::ForgetUnitLocked(Node& node, const std::string& task_id) {
  auto it = node.units.find(task_id);
  if (it == node.units.end()) return;
  Unit& unit = it->second;
  for (const Proc& p : unit.procs) {
    absl::Status s = node.launcher->Forget(p.launcher_id);
    if (!s.ok() && !absl::IsNotFound(s)) {
      Log("warn", node.name,
          absl::StrCat("task ", task_id, ": forget ", p.launcher_id, ": ",
                       Str(s.message())));
    }
    node.by_launcher_id.erase(p.launcher_id);
  }
  if (unit.persisted) ::unlink(UnitPath(node, task_id).c_str());
  node.units.erase(it);
}

Agent::Impl::Summary Agent::Impl::Summarize(const Unit& unit) {
  Summary s;
  const bool several = unit.procs.size() > 1;
  for (const Proc& p : unit.procs) {
    if (!p.ended()) {
      s.state = "running";
      return s;
    }
  }
  // The first failure decides: the one this agent saw first, else (tasks
  // recovered after a restart) the earliest by time, then by process.
  const Proc* first = nullptr;
  size_t first_k = 0;
  if (unit.first_failure &&
      *unit.first_failure < static_cast<int>(unit.procs.size()) &&
      unit.procs[*unit.first_failure].state == Proc::State::kExited) {
    first_k = static_cast<size_t>(*unit.first_failure);
    first = &unit.procs[first_k];
  }
  const bool seen = first != nullptr;
  for (size_t k = 0; k < unit.procs.size() && !seen; ++k) {
    const Proc& p = unit.procs[k];
    if (p.state != Proc::State::kExited || !p.failed()) continue;
    if (first == nullptr || p.ended_at < first->ended_at) {
      first = &p;
      first_k = k;
    }
  }
  if (first != nullptr) {
    s.state = "exited";
    s.signal = first->term_signal;
    s.exit_code =
        first->term_signal != 0 ? 128 + first->term_signal : first->exit_code;
    if (several) {
      s.reason = absl::StrCat(
          "process ", first_k, " ",
          first->term_signal != 0
              ? absl::StrCat("was killed by ", SignalName(first->term_signal))
              : absl::StrCat("exited with code ", first->exit_code));
    } else if (first->term_signal != 0) {
      s.reason = absl::StrCat("killed by ", SignalName(first->term_signal));
    }
    return s;
  }
  for (size_t k = 0; k < unit.procs.size(); ++k) {
    const Proc& p = unit.procs[k];
    if (p.state != Proc::State::kLost) continue;
    s.state = "lost";
    s.exit_code = -1;
    s.reason = several ? absl::StrCat("process ", k, ": ", p.reason) : p.reason;
    if (s.reason.empty()) s.reason = "lost";
    return s;
  }
  s.state = "exited";
  return s;
}

json Agent::Impl::StatusJson(const Node& node, const Unit& unit,
                             bool detailed) const {
  const Summary s = Summarize(unit);
  json j = {{"task_id", unit.task_id},
            {"state", s.state},
            {"exit_code", s.exit_code},
            {"signal", s.signal},
            {"reason", s.reason}};
  if (!detailed) return j;
  j["node"] = node.name;
  j["job_id"] = unit.job_id;
  j["task_index"] = unit.task_index;
  j["stopping"] = unit.stopping && s.state == "running";
  json procs = json::array();
  for (size_t k = 0; k < unit.procs.size(); ++k) {
    const Proc& p = unit.procs[k];
    const char* state = "starting";
    switch (p.state) {
      case Proc::State::kStarting:
        state = "starting";
        break;
      case Proc::State::kRunning:
        state = "running";
        break;
      case Proc::State::kExited:
        state = "exited";
        break;
      case Proc::State::kLost:
        state = "lost";
        break;
    }
    json pj = {{"index", k}, {"state", state}, {"pid", p.pid}};
    if (p.state == Proc::State::kExited) {
      pj["exit_code"] = p.term_signal != 0 ? 128 + p.term_signal : p.exit_code;
      pj["signal"] = p.term_signal;
    }
    if (!p.reason.empty()) pj["reason"] = p.reason;
    procs.push_back(std::move(pj));
  }
  j["processes"] = std::move(procs);
  return j;
}

void Agent::Impl::ReportSoon(Node& node) {
  absl::MutexLock lock(&sched_mu_);
  node.report_pending = true;
  if (!node.registered) return;
  const absl::Time soon = absl::Now() + kReportDelay;
  if (node.next_due > soon) node.next_due = soon;
  sched_cv_.SignalAll();
}

absl::StatusOr<std::optional<UserAccount>> Agent::Impl::TaskUser(
    const Node& node, const LaunchRequest& r) const {
  if (!switch_users_ || r.user.empty()) return std::nullopt;
  absl::StatusOr<UserAccount> account = options_.lookup_user(r.user);
  if (absl::IsNotFound(account.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat("user '", r.user, "' does not exist on node ", node.name));
  }
  if (!account.ok()) {
    return absl::UnavailableError(
        absl::StrCat("node ", node.name, ": cannot look up user '", r.user,
                     "': ", Str(account.status().message())));
  }
  return *std::move(account);
}

TaskSpec Agent::Impl::BuildSpec(const Node& node, const LaunchRequest& r,
                                const Proc& proc, int k,
                                const UserAccount* account) const {
  TaskSpec spec;
  spec.task_id = proc.launcher_id;
  spec.argv = r.argv;
  spec.env = r.env;
  if (r.processes > 1 || r.rank_base) {
    spec.env["RANK"] = absl::StrCat(r.rank_base.value_or(0) + k);
    spec.env["LOCAL_RANK"] = absl::StrCat(k);
  }
  if (r.processes > 1) {
    spec.env.try_emplace("LOCAL_WORLD_SIZE", absl::StrCat(r.processes));
  }
  spec.env.try_emplace("CUDA_VISIBLE_DEVICES", absl::StrJoin(r.gpus, ","));
  spec.env.try_emplace("LOOM_NODE", node.name);
  // So that `loom checkpoint` (or any loom CLI call) works inside a task.
  spec.env.try_emplace("LOOM_SERVER", absl::StrJoin(options_.server_urls, ","));
  spec.working_dir = r.working_dir;
  spec.stdout_path = proc.stdout_path;
  spec.stderr_path = proc.stderr_path;
  spec.limits = r.limits;
  // Made by the task as its user, so that it owns it.
  if (auto it = spec.env.find("LOOM_CHECKPOINT_DIR"); it != spec.env.end()) {
    spec.create_dirs.push_back(it->second);
  }
  if (account != nullptr) RunSpecAs(*account, spec);
  return spec;
}

absl::StatusOr<json> Agent::Impl::LaunchUnit(Node& node, const LaunchRequest& r,
                                             std::string* field) {
  for (int g : r.gpus) {
    if (g >= static_cast<int>(node.gpus.size())) {
      return FieldError(
          field, "gpus",
          absl::StrCat("node ", node.name, " has ", node.gpus.size(),
                       " GPUs (indices 0 to ",
                       static_cast<int>(node.gpus.size()) - 1, "); got ", g));
    }
  }
  absl::StatusOr<std::optional<UserAccount>> account = TaskUser(node, r);
  if (!account.ok()) {
    if (field != nullptr) *field = "user";
    Log("warn", node.name,
        absl::StrCat("launch of task ", r.task_id,
                     " failed: ", Str(account.status().message())));
    return account.status();
  }
  // Nobody named a checkpoint dir: the job gets one on this node, its
  // user's (checkpoint_dir.h). Without it the task runs, without the env.
  const UserAccount* user = account->has_value() ? &**account : nullptr;
  absl::StatusOr<std::string> checkpoint_dir = DefaultCheckpointDir(
      options_.fake_tasks ? "" : node.root, r.job_id, r.env,
      user ? std::optional(std::pair(user->uid, user->gid)) : std::nullopt);
  if (!checkpoint_dir.ok()) {
    Log("warn", node.name,
        absl::StrCat("task ", r.task_id, ": ",
                     Str(checkpoint_dir.status().message())));
  }
  const int count = r.processes;
  Unit unit;
  unit.task_id = r.task_id;
  unit.job_id = r.job_id;
  unit.task_index = r.task_index;
  unit.gpus = r.gpus;
  unit.launching = true;
  unit.persisted = count > 1 && !node.units_dir.empty();
  for (int k = 0; k < count; ++k) {
    Proc p;
    p.launcher_id = count == 1 ? r.task_id : absl::StrCat(r.task_id, ".p", k);
    p.stdout_path = LogPath(node, r.task_id, k, false);
    p.stderr_path = LogPath(node, r.task_id, k, true);
    unit.procs.push_back(std::move(p));
  }
  const std::vector<Proc> procs = unit.procs;
  {
    absl::MutexLock lock(&node.mu);
    if (auto it = node.units.find(r.task_id); it != node.units.end()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "task ", r.task_id, " is already known on node ", node.name, " (",
          it->second.launching ? "being launched" : Summarize(it->second).state,
          "); a task id is launched once"));
    }
    for (const Proc& p : procs) {
      if (auto it = node.by_launcher_id.find(p.launcher_id);
          it != node.by_launcher_id.end()) {
        return absl::AlreadyExistsError(
            absl::StrCat("task ", r.task_id, ": process id ", p.launcher_id,
                         " is taken by task ", it->second.first));
      }
    }
    for (int k = 0; k < count; ++k) {
      node.by_launcher_id[procs[k].launcher_id] = {r.task_id, k};
    }
    node.units.emplace(r.task_id, std::move(unit));
  }
  if (count > 1 && !node.units_dir.empty()) {
    json m = {{"version", 1},       {"task_id", r.task_id},
              {"job_id", r.job_id}, {"task_index", r.task_index},
              {"gpus", r.gpus},     {"processes", json::array()}};
    for (const Proc& p : procs) {
      m["processes"].push_back({{"launcher_id", p.launcher_id},
                                {"stdout", p.stdout_path},
                                {"stderr", p.stderr_path}});
    }
    absl::Status s = WriteFileAtomically(UnitPath(node, r.task_id), Dump(m, 2),
                                         kPrivateFileMode);
    if (!s.ok()) {
      absl::MutexLock lock(&node.mu);
      for (const Proc& p : procs) node.by_launcher_id.erase(p.launcher_id);
      node.units.erase(r.task_id);
      return absl::InternalError(absl::StrCat(
          "task ", r.task_id, ": cannot record it: ", Str(s.message())));
    }
  }
  absl::Status failure;
  int failed_k = 0;
  std::vector<pid_t> pids;
  for (int k = 0; k < count; ++k) {
    TaskSpec spec = BuildSpec(node, r, procs[k], k,
                              account->has_value() ? &**account : nullptr);
    if (checkpoint_dir.ok() && !checkpoint_dir->empty()) {
      spec.env.try_emplace("LOOM_CHECKPOINT_DIR", *checkpoint_dir);
    }
    absl::StatusOr<TaskHandle> handle = node.launcher->Launch(spec);
    if (!handle.ok()) {
      failure = handle.status();
      failed_k = k;
      break;
    }
    pids.push_back(handle->pid);
    absl::MutexLock lock(&node.mu);
    Proc& p = node.units[r.task_id].procs[k];
    p.pid = handle->pid;
    if (p.state == Proc::State::kStarting) p.state = Proc::State::kRunning;
  }
  if (!failure.ok()) {
    const bool clean = RollBackLaunch(node, r.task_id);
    std::string message = Str(failure.message());
    if (count > 1) {
      message = absl::StrCat("process ", failed_k, " of ", count, ": ", message,
                             failed_k > 0 ? "; the processes already started "
                                            "were killed"
                                          : "");
    }
    if (!clean) {
      absl::StrAppend(&message,
                      "; some processes could not be confirmed gone: the "
                      "task stays reported until they are");
    }
    Log("warn", node.name,
        absl::StrCat("launch of task ", r.task_id, " failed: ", message));
    return absl::Status(failure.code(), message);
  }
  json result;
  bool report = false;
  {
    absl::MutexLock lock(&node.mu);
    Unit& u = node.units[r.task_id];
    u.launching = false;
    if (u.stop_after_launch) {
      StopUnitLocked(node, u, u.stop_after_launch->first,
                     u.stop_after_launch->second);
    }
    AfterChange(node, u, &report);
    result = StatusJson(node, u, /*detailed=*/true);
  }
  Log("info", node.name,
      absl::StrCat(
          "launched task ", r.task_id, " (job ", r.job_id, ", task index ",
          r.task_index, ", ", count, count == 1 ? " process" : " processes",
          ", pid", count == 1 ? " " : "s ", absl::StrJoin(pids, ","),
          r.gpus.empty() ? ""
                         : absl::StrCat(", GPUs ", absl::StrJoin(r.gpus, ",")),
          ")"));
  if (report) ReportSoon(node);
  return result;
}

bool Agent::Impl::RollBackLaunch(Node& node, const std::string& task_id) {
  std::vector<std::string> started;
  std::vector<std::string> all;
  {
    absl::MutexLock lock(&node.mu);
    for (const Proc& p : node.units[task_id].procs) {
      all.push_back(p.launcher_id);
      if (p.state != Proc::State::kStarting) started.push_back(p.launcher_id);
    }
  }
  for (const std::string& id : started) {
    (void)node.launcher->Signal(id, SIGKILL);
  }
  const absl::Time deadline = absl::Now() + kRollbackWait;
  bool gone = false;
  while (true) {
    PollNode(node);
    {
      absl::MutexLock lock(&node.mu);
      gone = true;
      for (const Proc& p : node.units[task_id].procs) {
        if (p.state == Proc::State::kRunning) gone = false;
      }
    }
    if (gone || absl::Now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  absl::MutexLock lock(&node.mu);
  Unit& unit = node.units[task_id];
  if (!gone) {
    unit.launching = false;
    for (Proc& p : unit.procs) {
      if (p.state == Proc::State::kStarting) {
        p.state = Proc::State::kLost;
        p.reason = "never started: the launch failed";
      }
    }
    StopUnitLocked(node, unit, SIGKILL, absl::ZeroDuration());
    return false;
  }
  for (const std::string& id : started) {
    absl::Status s = node.launcher->Forget(id);
    if (!s.ok() && !absl::IsNotFound(s)) {
      Log("warn", node.name,
          absl::StrCat("task ", task_id, ": forget ", id, ": ",
                       Str(s.message())));
    }
  }
  for (const Proc& p : unit.procs) {
    ::unlink(p.stdout_path.c_str());
    ::unlink(p.stderr_path.c_str());
  }
  if (unit.persisted) ::unlink(UnitPath(node, task_id).c_str());
  for (const std::string& id : all) node.by_launcher_id.erase(id);
  node.units.erase(task_id);
  return true;
}

// ---------------------------------------------------------------------------
// Registration and heartbeats.

void Agent::Impl::WorkerLoop(Worker& worker) {
  while (!stopping_.load()) {
    std::vector<Node*> due;
    {
      absl::MutexLock lock(&sched_mu_);
      absl::Time next = absl::InfiniteFuture();
      const absl::Time now = absl::Now();
      for (Node* node : worker.nodes) {
        if (node->next_due <= now) {
          due.push_back(node);
        } else {
          next = std::min(next, node->next_due);
        }
      }
      if (due.empty()) {
        if (stopping_.load()) break;
        sched_cv_.WaitWithDeadline(&sched_mu_, next);
        continue;
      }
    }
    for (Node* node : due) {
      if (stopping_.load()) break;
      Tick(worker, *node);
    }
  }
}

void Agent::Impl::Tick(Worker& worker, Node& node) {
  bool registered;
  {
    absl::MutexLock lock(&sched_mu_);
    registered = node.registered;
  }
  if (registered) {
    Heartbeat(worker, node);
  } else {
    Register(worker, node);
  }
}

void Agent::Impl::ScheduleNext(Node& node, absl::Duration delay) {
  absl::MutexLock lock(&sched_mu_);
  if (node.report_pending) delay = std::min(delay, kReportDelay);
  node.next_due = absl::Now() + delay;
}

void Agent::Impl::Backoff(Node& node) {
  thread_local std::minstd_rand rng(std::random_device{}());
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  absl::MutexLock lock(&sched_mu_);
  node.next_due = absl::Now() + node.backoff * jitter(rng);
  node.backoff = std::min(node.backoff * 2, kMaxBackoff);
}

void Agent::Impl::Problem(Node& node, const std::string& message) {
  if (message == node.last_problem) return;
  node.last_problem = message;
  Log("warn", node.name, message);
}

Agent::Impl::ServerReply Agent::Impl::Post(Worker& worker,
                                           const std::string& path,
                                           const json& body,
                                           const std::string& bearer) {
  ServerReply reply;
  const std::string payload = Dump(body);
  const size_t n = worker.clients.size();
  std::vector<std::string> errors;
  httplib::Headers headers;
  if (!bearer.empty()) headers.emplace("Authorization", "Bearer " + bearer);
  for (size_t i = 0; i < n; ++i) {
    const size_t idx = (worker.preferred + i) % n;
    const std::string& url = options_.server_urls[idx];
    httplib::Result res = worker.clients[idx]->Post(
        path.c_str(), headers, payload, "application/json");
    if (!res) {
      errors.push_back(absl::StrCat(url, ": ", DescribeHttpError(res.error())));
      continue;
    }
    // 503: busy or no leader yet; 307: a standby of a replicated
    // controller (docs/ha.md). The leader is another server of the list.
    if ((res->status == 503 || res->status == 307) && i + 1 < n) {
      errors.push_back(absl::StrCat(url, res->status == 307
                                             ? ": a standby"
                                             : ": HTTP 503 (unavailable)"));
      continue;
    }
    worker.preferred = idx;
    reply.answered = true;
    reply.status = res->status;
    reply.url = url;
    reply.text = res->body.substr(0, 300);
    reply.body = json::parse(res->body, nullptr, false);
    if (reply.body.is_discarded()) reply.body = json();
    return reply;
  }
  reply.error = absl::StrJoin(errors, "; ");
  return reply;
}

std::string Agent::Impl::ReplyMessage(const ServerReply& reply) {
  if (reply.body.is_object()) {
    auto error = reply.body.find("error");
    if (error != reply.body.end() && error->is_object()) {
      auto message = error->find("message");
      if (message != error->end() && message->is_string()) {
        return message->get<std::string>();
      }
    }
  }
  return reply.text;
}

json Agent::Impl::TaskStatuses(Node& node,
                               std::vector<std::string>* ended_ids) {
  json tasks = json::array();
  absl::MutexLock lock(&node.mu);
  for (const auto& [id, unit] : node.units) {
    if (unit.launching) continue;
    json status = StatusJson(node, unit, /*detailed=*/false);
    if (status["state"] != "running") ended_ids->push_back(id);
    tasks.push_back(std::move(status));
  }
  return tasks;
}

json Agent::Impl::RegistrationBody(Node& node,
                                   std::vector<std::string>* ended_ids) {
  json gpus = json::array();
  for (const GpuDevice& gpu : node.gpus) {
    gpus.push_back({{"index", gpu.index},
                    {"model", gpu.model},
                    {"uuid", gpu.uuid},
                    {"memory_bytes", gpu.memory_bytes}});
  }
  return {{"name", node.name},
          {"address", address_},
          {"hostname", node.host.hostname},
          {"cpus", node.host.cpus},
          {"memory_bytes", node.host.memory_bytes},
          {"gpus", std::move(gpus)},
          {"emulated", node.emulated},
          {"health", HealthJson(node)},
          {"tasks", TaskStatuses(node, ended_ids)}};
}

void Agent::Impl::Register(Worker& worker, Node& node) {
  {
    absl::MutexLock lock(&sched_mu_);
    node.report_pending = false;
  }
  std::vector<std::string> ended;
  const json body = RegistrationBody(node, &ended);
  const absl::Time sent = absl::Now();
  std::string bearer;
  {
    absl::MutexLock lock(&sched_mu_);
    bearer = node.credential;
  }
  const bool joining = bearer.empty();
  if (joining) bearer = options_.join_token;
  ServerReply reply = Post(worker, "/v1/agents/register", body, bearer);
  if (!reply.answered) {
    Problem(node, absl::StrCat("cannot register: no server answers (",
                               reply.error, "); retrying"));
    Backoff(node);
    return;
  }
  if (reply.status != 200) {
    std::string hint;
    if (reply.status == 401 && joining) {
      hint = options_.join_token.empty()
                 ? " (this node has no credential: start the agent with "
                   "--join-token-file, a token from `loom token create "
                   "--join`)"
                 : " (the join token is not valid: expired, used or revoked?)";
    } else if (reply.status == 401) {
      hint = absl::StrCat(
          " (this node's credential in ", node.root,
          "/credential was refused: revoked? Remove the file and join again "
          "with a new join token)");
    }
    Problem(node, absl::StrCat("registration refused by ", reply.url, ": HTTP ",
                               reply.status, ": ", ReplyMessage(reply), hint,
                               "; retrying"));
    Backoff(node);
    return;
  }
  if (reply.body.is_object()) {
    if (reply.body.contains("agent_key") &&
        reply.body["agent_key"].is_string()) {
      AcceptServerKey(node, reply.body["agent_key"].get<std::string>());
    }
    if (reply.body.contains("credential") &&
        reply.body["credential"].is_string()) {
      const std::string credential = reply.body["credential"];
      if (absl::Status s = WriteSecretFile(
              absl::StrCat(node.root, "/credential"), credential + "\n");
          !s.ok()) {
        Log("warn", node.name,
            absl::StrCat("cannot save the node credential (", Str(s.message()),
                         "): the node must join again after a restart"));
      }
      absl::MutexLock lock(&sched_mu_);
      node.credential = credential;
    }
  }
  absl::Duration interval = options_.heartbeat_interval;
  if (interval <= absl::ZeroDuration()) {
    interval = kDefaultHeartbeat;
    if (reply.body.is_object() &&
        reply.body.contains("heartbeat_interval_ms")) {
      std::optional<int64_t> ms = AsInt(reply.body["heartbeat_interval_ms"]);
      if (ms && *ms >= 10 && *ms <= 600000) interval = absl::Milliseconds(*ms);
    }
  }
  absl::Duration fence_after = absl::ZeroDuration();
  if (reply.body.is_object() && reply.body.contains("fence_after_ms")) {
    std::optional<int64_t> ms = AsInt(reply.body["fence_after_ms"]);
    if (ms && *ms > 0) fence_after = absl::Milliseconds(*ms);
  }
  {
    absl::MutexLock lock(&sched_mu_);
    node.last_ack_sent = sent;
    node.fence_after = fence_after;
    node.fenced = false;
    node.registered = true;
    node.interval = interval;
    node.backoff = kInitialBackoff;
    node.next_due =
        absl::Now() + (node.report_pending ? kReportDelay : interval);
  }
  if (!options_.fake_tasks) WriteLease(node, sent, fence_after);
  node.registered_flag.store(true);
  node.last_problem.clear();
  Log("info", node.name,
      absl::StrCat("registered with ", reply.url, " as ", address_, ": ",
                   node.gpus.size(), " GPUs, ", body["tasks"].size(),
                   " tasks; heartbeat every ", absl::FormatDuration(interval)));
  HandleServerReply(node, reply.body, ended);
}

void Agent::Impl::Heartbeat(Worker& worker, Node& node) {
  absl::Duration interval;
  {
    absl::MutexLock lock(&sched_mu_);
    interval = node.interval;
    node.report_pending = false;
  }
  if (node.drop_heartbeats.load()) {
    ScheduleNext(node, interval);
    return;
  }
  std::vector<std::string> ended;
  const json body = {{"name", node.name},
                     {"health", HealthJson(node)},
                     {"tasks", TaskStatuses(node, &ended)}};
  const absl::Time sent = absl::Now();
  std::string bearer;
  {
    absl::MutexLock lock(&sched_mu_);
    bearer = node.credential;
  }
  ServerReply reply = Post(worker, "/v1/agents/heartbeat", body, bearer);
  {
    absl::MutexLock lock(&stats_mu_);
    if (!reply.answered || reply.status != 200) {
      ++heartbeats_failed_;
    } else if (heartbeat_ms_.size() < kMaxLatencySamples) {
      heartbeat_ms_.push_back(
          static_cast<float>(absl::ToDoubleMilliseconds(absl::Now() - sent)));
    }
  }
  if (!reply.answered) {
    Problem(node, absl::StrCat("heartbeat failed: no server answers (",
                               reply.error, ")"));
    ScheduleNext(node, interval);
    return;
  }
  if (reply.status == 200) {
    absl::Duration fence_after;
    {
      absl::MutexLock lock(&sched_mu_);
      node.last_ack_sent = sent;
      node.fenced = false;
      fence_after = node.fence_after;
    }
    if (!options_.fake_tasks) WriteLease(node, sent, fence_after);
    if (!node.last_problem.empty()) {
      node.last_problem.clear();
      Log("info", node.name,
          absl::StrCat("heartbeats reach ", reply.url, " again"));
    }
    ScheduleNext(node, interval);
    HandleServerReply(node, reply.body, ended);
    return;
  }
  const std::string message = ReplyMessage(reply);
  if (reply.status == 404 || reply.status == 409 || reply.status == 412 ||
      absl::StrContains(absl::AsciiStrToLower(message), "not registered")) {
    Log("info", node.name,
        absl::StrCat("the server asks this node to register again (HTTP ",
                     reply.status, ": ", message, ")"));
    {
      absl::MutexLock lock(&sched_mu_);
      node.registered = false;
      node.backoff = kInitialBackoff;
      node.next_due = absl::Now();
    }
    node.registered_flag.store(false);
    return;
  }
  Problem(node, absl::StrCat("heartbeat refused by ", reply.url, ": HTTP ",
                             reply.status, ": ", message));
  ScheduleNext(node, interval);
}

void Agent::Impl::HandleServerReply(
    Node& node, const json& reply,
    const std::vector<std::string>& reported_ended) {
  if (!reply.is_object()) return;
  auto ids = [&](const char* key) {
    std::vector<std::string> out;
    auto it = reply.find(key);
    if (it == reply.end() || !it->is_array()) return out;
    for (const json& v : *it) {
      if (v.is_string()) out.push_back(v.get<std::string>());
    }
    return out;
  };
  const std::vector<std::string> acks = ids("ack");
  const std::vector<std::string> stops = ids("stop");
  if (acks.empty() && stops.empty()) return;
  const std::set<std::string> reported(reported_ended.begin(),
                                       reported_ended.end());
  absl::MutexLock lock(&node.mu);
  for (const std::string& id : acks) {
    auto it = node.units.find(id);
    if (it == node.units.end() || it->second.launching) continue;
    if (Summarize(it->second).state == "running") {
      Log("warn", node.name,
          absl::StrCat("the server acknowledged task ", id,
                       ", which still runs; ignored"));
      continue;
    }
    ForgetUnitLocked(node, id);
  }
  for (const std::string& id : stops) {
    auto it = node.units.find(id);
    if (it == node.units.end()) continue;
    Unit& unit = it->second;
    if (unit.launching) {
      unit.stop_after_launch =
          std::make_pair(options_.stop_signal, options_.stop_grace);
      continue;
    }
    if (Summarize(unit).state != "running") {
      // Ended, and the server saw that (it was in the request this reply
      // answers) but does not want it: nothing is left to report.
      if (reported.contains(id)) {
        Log("info", node.name,
            absl::StrCat("forgetting ended task ", id,
                         ": the server does not expect it"));
        ForgetUnitLocked(node, id);
      }
      continue;
    }
    if (unit.stopping) continue;
    Log("info", node.name,
        absl::StrCat("stopping task ", id, " (",
                     SignalName(options_.stop_signal), ", then SIGKILL after ",
                     absl::FormatDuration(options_.stop_grace),
                     "): the server asks"));
    StopUnitLocked(node, unit, options_.stop_signal, options_.stop_grace);
  }
}

// ---------------------------------------------------------------------------
// The agent API.

namespace {

void SendJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(Dump(body), "application/json");
}

void SendError(httplib::Response& res, int status, const std::string& code,
               const std::string& message, const std::string& field = "") {
  json error = {{"code", code}, {"message", message}};
  if (!field.empty()) error["field"] = field;
  SendJson(res, status, {{"error", std::move(error)}});
}

void SendStatus(httplib::Response& res, const absl::Status& status,
                const std::string& field = "") {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      SendError(res, 400, "invalid_argument", Str(status.message()), field);
      return;
    case absl::StatusCode::kNotFound:
      SendError(res, 404, "not_found", Str(status.message()), field);
      return;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
      SendError(res, 409, "failed_precondition", Str(status.message()), field);
      return;
    case absl::StatusCode::kUnavailable:
      SendError(res, 503, "unavailable", Str(status.message()), field);
      return;
    default:
      SendError(res, 500, "internal", Str(status.message()), field);
  }
}

template <typename F>
void Guarded(httplib::Response& res, F&& handler) {
  try {
    handler();
  } catch (const std::exception& e) {
    SendError(res, 500, "internal", absl::StrCat("internal error: ", e.what()));
  } catch (...) {
    SendError(res, 500, "internal", "internal error");
  }
}

// Parses an optional JSON object body ("" is an empty object).
std::optional<json> ObjectBody(const httplib::Request& req,
                               httplib::Response& res) {
  if (absl::StripAsciiWhitespace(req.body).empty()) return json::object();
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    SendError(res, 400, "invalid_argument",
              "the request body must be a JSON object", "body");
    return std::nullopt;
  }
  return body;
}

}  // namespace

bool Agent::Impl::Authorized(const httplib::Request& req,
                             httplib::Response& res) {
  const ApiVerdict v = guard_.Check(req.get_header_value("Authorization"));
  if (v.allowed) return true;
  if (v.status == 401) {
  res.set_header("WWW-Authenticate", "Bearer realm=\"loom-agent\"");
  }
  SendError(res, v.status, v.code, v.message);
  return false;
}

void Agent::Impl::AcceptServerKey(Node& node, const std::string& key) {
  if (!guard_.SetKey(node.name, key)) return;
  if (absl::Status s =
          WriteSecretFile(absl::StrCat(node.root, "/agent_key"), key + "\n");
      !s.ok()) {
    // The key comes again with the next registration.
    Log("warn", node.name,
        absl::StrCat("cannot save the server's key (", Str(s.message()),
                     "); until the next registration after a restart, this "
                     "agent answers 503"));
  }
}

void Agent::Impl::InstallRoutes() {
  using httplib::Request;
  using httplib::Response;
  auto route = [this](void (Impl::*handler)(const Request&, Response&)) {
    return [this, handler](const Request& req, Response& res) {
      // An injected slow agent (`POST /v1/faults` delay_ms); never the
      // fault route itself, so that the fault can be lifted.
      if (const int64_t ms = api_delay_ms_.load();
          ms > 0 && handler != &Impl::HandleFaults) {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      }
      Guarded(res, [&] { (this->*handler)(req, res); });
    };
  };
  // Public: health, telemetry and heartbeat statistics, like node-exporter.
  // Everything else needs the server's key.
  auto secured = [this,
                  route](void (Impl::*handler)(const Request&, Response&)) {
    return [this, inner = route(handler)](const Request& req, Response& res) {
      if (Authorized(req, res)) inner(req, res);
    };
  };
  server_->Post("/v1/tasks", secured(&Impl::HandleLaunch));
  server_->Get("/v1/tasks", secured(&Impl::HandleList));
  server_->Post(R"(/v1/tasks/([^/]+)/stop)", secured(&Impl::HandleStop));
  server_->Get(R"(/v1/tasks/([^/]+)/logs)", secured(&Impl::HandleLogs));
  server_->Get(R"(/v1/tasks/([^/]+))", secured(&Impl::HandleGet));
  server_->Post("/v1/faults", secured(&Impl::HandleFaults));
  server_->Get("/v1/stats", route(&Impl::HandleStats));
  server_->Get("/metrics", route(&Impl::HandleMetrics));
  server_->Get("/healthz", [](const Request&, Response& res) {
    SendJson(res, 200, {{"ok", true}});
  });
  server_->set_error_handler([](const Request& req, Response& res) {
    if (!res.body.empty()) return;
    switch (res.status) {
      case 404:
        SendError(res, 404, "not_found",
                  absl::StrCat("no route ", req.method, " ", req.path));
        break;
      case 413:
        SendError(res, 413, "too_large", "the request body is over 1 MiB");
        break;
      case 400:
        SendError(res, 400, "invalid_argument", "bad request");
        break;
      default:
        SendError(res, res.status, "internal",
                  absl::StrCat("HTTP ", res.status));
    }
  });
}

absl::StatusOr<Agent::Impl::Node*> Agent::Impl::ResolveNode(
    const std::string& name) const {
  if (name.empty()) {
    if (nodes_.size() == 1) return nodes_.front().get();
    return absl::InvalidArgumentError(absl::StrCat(
        "node: this agent serves ", nodes_.size(),
        " emulated nodes; name one (\"node\" in the body or ?node=NAME)"));
  }
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "this agent does not serve node '", name, "' (it serves ",
        nodes_.size() <= 4
            ? absl::StrJoin(node_names(), ", ")
            : absl::StrCat(nodes_.size(), " nodes: ", nodes_.front()->name,
                           " .. ", nodes_.back()->name),
        ")"));
  }
  return it->second;
}

absl::StatusOr<Agent::Impl::Node*> Agent::Impl::NodeForTask(
    const std::string& name, const std::string& task_id) const {
  if (!name.empty() || nodes_.size() == 1) return ResolveNode(name);
  for (const auto& node : nodes_) {
    absl::MutexLock lock(&node->mu);
    if (node->units.contains(task_id)) return node.get();
  }
  for (const auto& node : nodes_) {
    struct stat st;
    if (::stat(LogPath(*node, task_id, 0, false).c_str(), &st) == 0) {
      return node.get();
    }
  }
  return absl::NotFoundError(absl::StrCat(
      "task ", task_id, " is not known on any node of this agent"));
}

bool Agent::Impl::ProcEnded(Node& node, const std::string& task_id, int k) {
  absl::MutexLock lock(&node.mu);
  auto it = node.units.find(task_id);
  if (it == node.units.end()) return true;
  if (k >= static_cast<int>(it->second.procs.size())) return true;
  return it->second.procs[k].ended();
}

void Agent::Impl::HandleLaunch(const httplib::Request& req,
                               httplib::Response& res) {
  const json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded()) {
    SendError(res, 400, "invalid_argument",
              "the request body is not valid JSON", "body");
    return;
  }
  std::string field;
  absl::StatusOr<LaunchRequest> request = ParseLaunchRequest(body, &field);
  if (!request.ok()) {
    SendStatus(res, request.status(), field);
    return;
  }
  std::string node_name = req.get_param_value("node");
  if (!node_name.empty() && !request->node.empty() &&
      node_name != request->node) {
    SendError(res, 400, "invalid_argument",
              absl::StrCat("node: the query names '", node_name,
                           "', the body '", request->node, "'"),
              "node");
    return;
  }
  if (node_name.empty()) node_name = request->node;
  absl::StatusOr<Node*> node = ResolveNode(node_name);
  if (!node.ok()) {
    SendStatus(res, node.status(), "node");
    return;
  }
  field.clear();
  absl::StatusOr<json> launched = LaunchUnit(**node, *request, &field);
  if (!launched.ok()) {
    const absl::Status& s = launched.status();
    switch (s.code()) {
      case absl::StatusCode::kAlreadyExists:
        SendError(res, 409, "failed_precondition", Str(s.message()));
        break;
      case absl::StatusCode::kInvalidArgument:
      case absl::StatusCode::kNotFound:
      case absl::StatusCode::kPermissionDenied:
      case absl::StatusCode::kFailedPrecondition:
      case absl::StatusCode::kOutOfRange:
        // The request cannot run here (missing program, bad directory, ...).
        SendError(res, 400, "invalid_argument", Str(s.message()), field);
        break;
      default:
        SendError(res, 500, "internal", Str(s.message()), field);
    }
    return;
  }
  SendJson(res, 201, *launched);
}

void Agent::Impl::HandleList(const httplib::Request& req,
                             httplib::Response& res) {
  std::vector<Node*> nodes;
  const std::string name = req.get_param_value("node");
  if (!name.empty()) {
    absl::StatusOr<Node*> node = ResolveNode(name);
    if (!node.ok()) {
      SendStatus(res, node.status(), "node");
      return;
    }
    nodes.push_back(*node);
  } else {
    for (const auto& node : nodes_) nodes.push_back(node.get());
  }
  json tasks = json::array();
  for (Node* node : nodes) {
    absl::MutexLock lock(&node->mu);
    for (const auto& [id, unit] : node->units) {
      if (unit.launching) continue;
      tasks.push_back(StatusJson(*node, unit, /*detailed=*/true));
    }
  }
  SendJson(res, 200, {{"tasks", std::move(tasks)}});
}

void Agent::Impl::HandleGet(const httplib::Request& req,
                            httplib::Response& res) {
  const std::string id = req.matches[1];
  if (!ValidTaskId(id)) {
    SendError(res, 404, "not_found", absl::StrCat("no task '", id, "'"));
    return;
  }
  absl::StatusOr<Node*> node = NodeForTask(req.get_param_value("node"), id);
  if (!node.ok()) {
    SendStatus(res, node.status(), "node");
    return;
  }
  absl::MutexLock lock(&(*node)->mu);
  auto it = (*node)->units.find(id);
  if (it == (*node)->units.end() || it->second.launching) {
    SendError(
        res, 404, "not_found",
        absl::StrCat("task ", id, " is not known on node ", (*node)->name));
    return;
  }
  SendJson(res, 200, StatusJson(**node, it->second, /*detailed=*/true));
}

void Agent::Impl::HandleStop(const httplib::Request& req,
                             httplib::Response& res) {
  const std::string id = req.matches[1];
  if (!ValidTaskId(id)) {
    SendError(res, 404, "not_found", absl::StrCat("no task '", id, "'"));
    return;
  }
  std::optional<json> body = ObjectBody(req, res);
  if (!body) return;
  int signal = options_.stop_signal;
  absl::Duration grace = options_.stop_grace;
  if (auto it = body->find("signal"); it != body->end() && !it->is_null()) {
    std::optional<int64_t> n = AsInt(*it);
    if (!n || *n <= 0 || *n >= NSIG) {
      SendError(res, 400, "invalid_argument",
                absl::StrCat("signal: must be a signal number from 1 to ",
                             NSIG - 1, ", got ", Dump(*it)),
                "signal");
      return;
    }
    signal = static_cast<int>(*n);
  }
  if (auto it = body->find("grace_ms"); it != body->end() && !it->is_null()) {
    std::optional<int64_t> n = AsInt(*it);
    if (!n || *n < 0 || *n > int64_t{7} * 24 * 3600 * 1000) {
      SendError(res, 400, "invalid_argument",
                absl::StrCat("grace_ms: must be milliseconds from 0 to a "
                             "week, got ",
                             Dump(*it)),
                "grace_ms");
      return;
    }
    grace = absl::Milliseconds(*n);
  }
  std::string name = req.get_param_value("node");
  if (auto it = body->find("node");
      name.empty() && it != body->end() && it->is_string()) {
    name = it->get<std::string>();
  }
  absl::StatusOr<Node*> node = NodeForTask(name, id);
  if (!node.ok()) {
    SendStatus(res, node.status(), "node");
    return;
  }
  Node& n = **node;
  absl::MutexLock lock(&n.mu);
  auto it = n.units.find(id);
  if (it == n.units.end()) {
    SendError(res, 404, "not_found",
              absl::StrCat("task ", id, " is not known on node ", n.name));
    return;
  }
  Unit& unit = it->second;
  if (unit.launching) {
    unit.stop_after_launch = std::make_pair(signal, grace);
  } else if (Summarize(unit).state == "running") {
    Log("info", n.name,
        absl::StrCat("stopping task ", id, " (", SignalName(signal),
                     ", then SIGKILL after ", absl::FormatDuration(grace),
                     ")"));
    StopUnitLocked(n, unit, signal, grace);
  }
  SendJson(res, 200, StatusJson(n, unit, /*detailed=*/true));
}

void Agent::Impl::HandleLogs(const httplib::Request& req,
                             httplib::Response& res) {
  const std::string id = req.matches[1];
  if (!ValidTaskId(id)) {
    SendError(res, 404, "not_found", absl::StrCat("no task '", id, "'"));
    return;
  }
  const std::string stream =
      req.has_param("stream") ? req.get_param_value("stream") : "stdout";
  if (stream != "stdout" && stream != "stderr") {
    SendError(
        res, 400, "invalid_argument",
        absl::StrCat("stream: must be stdout or stderr, got '", stream, "'"),
        "stream");
    return;
  }
  int64_t offset = 0;
  if (req.has_param("offset") &&
      (!absl::SimpleAtoi(req.get_param_value("offset"), &offset) ||
       offset < 0)) {
    SendError(res, 400, "invalid_argument",
              "offset: must be a byte offset (a whole number >= 0)", "offset");
    return;
  }
  int process = 0;
  if (req.has_param("process") &&
      (!absl::SimpleAtoi(req.get_param_value("process"), &process) ||
       process < 0 || process >= kMaxProcesses)) {
    SendError(res, 400, "invalid_argument",
              "process: must be a process index of the task", "process");
    return;
  }
  // At most this many bytes (the server reads logs in bounded pieces).
  int64_t limit = 0;
  if (req.has_param("limit") &&
      (!absl::SimpleAtoi(req.get_param_value("limit"), &limit) || limit < 1)) {
    SendError(res, 400, "invalid_argument",
              "limit: must be a positive byte count", "limit");
    return;
  }
  const std::string follow_text = req.get_param_value("follow");
  const bool follow = follow_text == "1" || follow_text == "true";
  absl::StatusOr<Node*> found = NodeForTask(req.get_param_value("node"), id);
  if (!found.ok()) {
    SendStatus(res, found.status(), "node");
    return;
  }
  Node* node = *found;
  std::string path;
  {
    absl::MutexLock lock(&node->mu);
    auto it = node->units.find(id);
    if (it != node->units.end()) {
      if (process >= static_cast<int>(it->second.procs.size())) {
        SendError(res, 400, "invalid_argument",
                  absl::StrCat("process: task ", id, " has ",
                               it->second.procs.size(), " processes"),
                  "process");
        return;
      }
      const Proc& p = it->second.procs[process];
      path = stream == "stdout" ? p.stdout_path : p.stderr_path;
    }
  }
  if (path.empty()) path = LogPath(*node, id, process, stream == "stderr");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    SendError(res, 404, "not_found",
              absl::StrCat(
                  "no ", stream, " for task ", id, " on node ", node->name,
                  process > 0 ? absl::StrCat(" (process ", process, ")") : ""));
    return;
  }
  auto fd_holder = std::shared_ptr<int>(new int(fd), [](int* p) {
    ::close(*p);
    delete p;
  });
  res.status = 200;
  if (!follow) {
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      SendError(res, 500, "internal", absl::StrCat("stat ", path));
      return;
    }
    const int64_t size = st.st_size;
    if (offset >= size) {
      res.set_content("", "text/plain");
      return;
    }
    res.set_content_provider(
        static_cast<size_t>(limit > 0 ? std::min(limit, size - offset)
                                      : size - offset),
        "text/plain",
        [fd_holder, offset](size_t off, size_t length,
                            httplib::DataSink& sink) {
          char buf[64 * 1024];
          const size_t want = std::min(length, sizeof(buf));
          const ssize_t n = ::pread(*fd_holder, buf, want,
                                    offset + static_cast<int64_t>(off));
          if (n <= 0) return false;
          return sink.write(buf, static_cast<size_t>(n));
        });
    return;
  }
  // Each stream holds a thread of the API server: leave most of them to
  // launches and stops.
  const int max_follows = std::max(1, options_.http_threads / 2);
  if (follows_.fetch_add(1) >= max_follows) {
    follows_.fetch_sub(1);
    res.set_header("Retry-After", "1");
    SendError(res, 503, "unavailable",
              absl::StrCat("too many log streams open (", max_follows,
                           "); try again later or read without follow"));
    return;
  }
  auto position = std::make_shared<int64_t>(offset);
  res.set_chunked_content_provider(
      "text/plain",
      [this, fd_holder, position, node, id, process](size_t,
                                                     httplib::DataSink& sink) {
        char buf[64 * 1024];
        while (true) {
          if (stopping_.load()) {
            sink.done();
            return true;
          }
          // Whether it ended is read before the file, so that output written
          // before the end is never missed.
          const bool ended = ProcEnded(*node, id, process);
          const ssize_t n = ::pread(*fd_holder, buf, sizeof(buf), *position);
          if (n < 0) return false;
          if (n > 0) {
            *position += n;
            return sink.write(buf, static_cast<size_t>(n));
          }
          if (ended) {
            sink.done();
            return true;
          }
          if (sink.is_writable && !sink.is_writable()) return false;
          absl::SleepFor(kFollowPoll);
        }
      },
      [this](bool) { follows_.fetch_sub(1); });
}

void Agent::Impl::HandleStats(const httplib::Request& req,
                              httplib::Response& res) {
  std::vector<float> ms;
  int64_t failed = 0;
  absl::Duration window;
  {
    absl::MutexLock lock(&stats_mu_);
    ms = heartbeat_ms_;
    failed = heartbeats_failed_;
    window = absl::Now() - stats_since_;
    if (req.get_param_value("reset") == "1") {
      heartbeat_ms_.clear();
      heartbeats_failed_ = 0;
      stats_since_ = absl::Now();
    }
  }
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) -> double {
    if (ms.empty()) return 0;
    return ms[std::min(ms.size() - 1, static_cast<size_t>(q * ms.size()))];
  };
  SendJson(res, 200,
           {{"window_s", absl::ToDoubleSeconds(window)},
            {"heartbeats",
             {{"answered", ms.size()},
              {"failed", failed},
              {"latency_ms",
               {{"p50", at(0.50)},
                {"p90", at(0.90)},
                {"p99", at(0.99)},
                {"max", ms.empty() ? 0.0 : ms.back()}}}}}});
}

void Agent::Impl::HandleMetrics(const httplib::Request&,
                                httplib::Response& res) {
  const absl::Time now = absl::Now();
  // Real GPUs: telemetry from NVML now (all nodes of a real agent share
  // the host's GPUs).
  std::vector<GpuDevice> real;
  if (probe_ != nullptr) {
    absl::StatusOr<std::vector<GpuDevice>> probed = probe_->Probe();
    if (probed.ok()) real = *std::move(probed);
  }
  std::map<pid_t, GroupUsage> usage;
  if (!options_.fake_tasks) usage = ReadProcessGroupUsage();
  const std::map<int, int64_t> xids = xid_watcher_ != nullptr
                                          ? xid_watcher_->LastXids()
                                          : std::map<int, int64_t>();
  std::vector<GpuMetricsRow> gpus;
  std::vector<TaskUsageRow> tasks;
  for (const auto& node : nodes_) {
    std::map<int, int64_t> holder;  // GPU index -> job
    {
      absl::MutexLock lock(&node->mu);
      for (const auto& [id, unit] : node->units) {
        if (unit.launching || Summarize(unit).state != "running") continue;
        for (int g : unit.gpus) holder[g] = unit.job_id;
        TaskUsageRow row;
        row.node = node->name;
        row.task_id = id;
        row.job = unit.job_id;
        row.task_index = unit.task_index;
        for (const Proc& p : unit.procs) {
          if (p.pid <= 0) continue;
          if (auto it = usage.find(p.pid); it != usage.end()) {
            row.cpu_seconds += it->second.cpu_seconds;
            row.rss_bytes += it->second.rss_bytes;
          }
        }
        tasks.push_back(std::move(row));
      }
    }
    const uint32_t failed = node->failed_gpus.load();
    for (const GpuDevice& device : node->gpus) {
      GpuMetricsRow row;
      row.hostname = node->host.hostname;
      row.node = node->name;
      row.emulated = node->emulated;
      row.gpu = device;
      auto held = holder.find(device.index);
      row.job = held == holder.end() ? 0 : held->second;
      if (node->emulated) {
        const bool down =
            device.index < 32 && (failed & (1u << device.index)) != 0;
        EmulateTelemetry(row.gpu, row.job != 0, down, now);
        row.xid = down ? 79 : 0;
      } else {
        for (const GpuDevice& r : real) {
          if (r.index == device.index) row.gpu = r;
        }
        if (xid_watcher_ != nullptr) {
          auto it = xids.find(device.index);
          row.xid = it == xids.end() ? 0 : it->second;
        }
      }
      gpus.push_back(std::move(row));
    }
  }
  std::string text;
  MetricsWriter out(&text);
  WriteAgentMetrics(out, gpus, tasks);
  res.status = 200;
  res.set_content(text, std::string(kMetricsContentType));
}

void Agent::Impl::HandleFaults(const httplib::Request& req,
                               httplib::Response& res) {
  std::optional<json> body = ObjectBody(req, res);
  if (!body) return;
  // Checked in full before anything changes.
  static constexpr const char* kKeys[] = {
      "node", "drop_heartbeats", "fail_gpu", "heal_gpu", "delay_ms", "exit",
      "clear"};
  bool any = false;
  for (const auto& item : body->items()) {
    const std::string& key = item.key();
    if (std::find_if(std::begin(kKeys), std::end(kKeys), [&](const char* k) {
          return key == k;
        }) == std::end(kKeys)) {
      SendError(res, 400, "invalid_argument",
                absl::StrCat("unknown fault '", key,
                             "'; known: drop_heartbeats, fail_gpu, heal_gpu, "
                             "delay_ms, exit, clear"),
                key);
      return;
    }
    if (key != "node") any = true;
  }
  if (!any) {
    SendError(res, 400, "invalid_argument",
              "no fault given (drop_heartbeats, fail_gpu, heal_gpu, delay_ms, "
              "exit or clear)",
              "body");
    return;
  }
  for (const char* key : {"drop_heartbeats", "exit", "clear"}) {
    if (body->contains(key) && !(*body)[key].is_boolean()) {
      SendError(res, 400, "invalid_argument",
                absl::StrCat(key, ": must be true or false"), key);
      return;
    }
  }
  std::string name = req.get_param_value("node");
  if (auto it = body->find("node");
      name.empty() && it != body->end() && it->is_string()) {
    name = it->get<std::string>();
  }
  std::vector<Node*> nodes;
  if (name.empty()) {
    for (const auto& node : nodes_) nodes.push_back(node.get());
  } else {
    absl::StatusOr<Node*> node = ResolveNode(name);
    if (!node.ok()) {
      SendStatus(res, node.status(), "node");
      return;
    }
    nodes.push_back(*node);
  }
  std::optional<int64_t> delay;
  if (body->contains("delay_ms")) {
    delay = AsInt((*body)["delay_ms"]);
    if (!delay || *delay < 0 || *delay > 60000) {
      SendError(res, 400, "invalid_argument",
                "delay_ms: must be a whole number of milliseconds from 0 to "
                "60000",
                "delay_ms");
      return;
    }
  }
  std::optional<int> fail_gpu, heal_gpu;
  for (const char* key : {"fail_gpu", "heal_gpu"}) {
    if (!body->contains(key)) continue;
    std::optional<int64_t> g = AsInt((*body)[key]);
    if (!options_.emulation) {
      SendError(res, 409, "failed_precondition",
                absl::StrCat(key,
                             ": only emulated GPUs can be failed or "
                             "healed (this agent uses NVML)"),
                key);
      return;
    }
    if (!g || *g < 0 || *g >= static_cast<int64_t>(nodes[0]->gpus.size()) ||
        *g >= 32) {
      SendError(res, 400, "invalid_argument",
                absl::StrCat(key, ": must be a GPU index from 0 to ",
                             nodes[0]->gpus.size() - 1),
                key);
      return;
    }
    (std::string(key) == "fail_gpu" ? fail_gpu : heal_gpu) =
        static_cast<int>(*g);
  }
  const bool clear = body->value("clear", false);
  if (clear) {
    api_delay_ms_.store(0);
    for (Node* node : nodes) {
      node->drop_heartbeats.store(false);
      node->failed_gpus.store(0);
      Log("info", node->name, "fault injection: all faults cleared");
      ReportSoon(*node);
    }
  }
  if (auto drop = body->find("drop_heartbeats"); drop != body->end()) {
    for (Node* node : nodes) {
      if (node->drop_heartbeats.exchange(drop->get<bool>()) !=
          drop->get<bool>()) {
        Log("info", node->name,
            drop->get<bool>() ? "fault injection: dropping heartbeats"
                              : "fault injection: heartbeats resume");
      }
    }
  }
  if (fail_gpu || heal_gpu) {
    for (Node* node : nodes) {
      if (fail_gpu) node->failed_gpus.fetch_or(1u << *fail_gpu);
      if (heal_gpu) node->failed_gpus.fetch_and(~(1u << *heal_gpu));
      Log("warn", node->name,
          fail_gpu ? absl::StrCat("fault injection: GPU ", *fail_gpu, " failed")
                   : absl::StrCat("fault injection: GPU ", *heal_gpu,
                                  " healthy again"));
      ReportSoon(*node);
    }
  }
  if (delay) {
    api_delay_ms_.store(*delay);
    Log("info", "",
        absl::StrCat("fault injection: agent API answers delayed by ", *delay,
                     " ms"));
  }
  if (body->value("exit", false)) {
    // The agent dies as if killed (its tasks keep running, as after a
    // crash): after this answer is on its way.
    Log("warn", "", "fault injection: the agent kills itself (SIGKILL)");
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      kill(getpid(), SIGKILL);
    }).detach();
  }
  SendJson(res, 200, {{"ok", true}, {"nodes", nodes.size()}});
}

// ---------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(AgentOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  if (absl::Status s = impl->Init(); !s.ok()) return s;
  return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Agent::~Agent() { Shutdown(); }

absl::Status Agent::Start() { return impl_->Start(); }

void Agent::Shutdown() { impl_->Shutdown(); }

const std::string& Agent::address() const { return impl_->address(); }

int Agent::port() const { return impl_->port(); }

std::vector<std::string> Agent::node_names() const {
  return impl_->node_names();
}

bool Agent::Registered(const std::string& node) const {
  return impl_->Registered(node);
}

}  // namespace loom
