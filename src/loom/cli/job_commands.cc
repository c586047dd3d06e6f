#include "loom/cli/job_commands.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fmt/format.h"
#include "loom/client/api_client.h"
#include "loom/common/fmt_absl.h"
#include "loom/common/job_id.h"
#include "loom/common/units.h"
#include "loom/core/job_spec.h"
#include "yaml-cpp/yaml.h"

namespace loom {
namespace {

using Json = nlohmann::json;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInterrupted = 130;

const char* const kJobStates[] = {"held",     "pending",   "running",
                                  "stopping", "succeeded", "failed",
                                  "cancelled"};

std::string S(absl::string_view s) { return std::string(s); }

// --- Reading the server's JSON leniently: a missing or null field is
// --- "not given", never an exception.

const Json* Field(const Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<int64_t> Int(const Json& j, const char* key) {
  const Json* v = Field(j, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) return static_cast<int64_t>(v->get<double>());
  return std::nullopt;
}

std::optional<double> Num(const Json& j, const char* key) {
  const Json* v = Field(j, key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->get<double>();
}

// A field as text ("" when absent); numbers and booleans are written out.
std::string Str(const Json& j, const char* key) {
  const Json* v = Field(j, key);
  if (v == nullptr) return "";
  if (v->is_string()) return v->get<std::string>();
  if (v->is_boolean()) return v->get<bool>() ? "true" : "false";
  if (v->is_number()) return v->dump();
  return "";
}

// `Str`, with "-" for nothing (table cells are never empty).
std::string Cell(const Json& j, const char* key) {
  std::string s = Str(j, key);
  return s.empty() ? "-" : s;
}

std::string Cell(std::optional<int64_t> v) {
  return v.has_value() ? absl::StrCat(*v) : "-";
}

std::optional<absl::Time> TimeField(const Json& j, const char* key) {
  const Json* v = Field(j, key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, v->get<std::string>(), &t, &err)) {
    return std::nullopt;
  }
  return t;
}

// The list under `key` of an answer, or the answer itself when it is a list.
const Json& Items(const Json& j, const char* key) {
  static const Json kEmpty = Json::array();
  if (j.is_array()) return j;
  const Json* v = Field(j, key);
  return v != nullptr && v->is_array() ? *v : kEmpty;
}

std::string FormatUtc(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", t, absl::UTCTimeZone());
}

// "2026-11-29 19:40:00 UTC (3m ago)", or "-".
std::string TimeAndAgo(const Json& j, const char* key, absl::Time now) {
  std::optional<absl::Time> t = TimeField(j, key);
  if (!t.has_value()) return Str(j, key).empty() ? "-" : Str(j, key);
  return absl::StrCat(FormatUtc(*t), " (", FormatAgo(*t, now), ")");
}

// "0-7", "0,2-3".
std::string FormatIndexList(const Json& list) {
  std::vector<int64_t> v;
  if (list.is_array()) {
    for (const Json& x : list) {
      if (x.is_number_integer()) v.push_back(x.get<int64_t>());
    }
  }
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  std::vector<std::string> parts;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(v[i])
                           : absl::StrCat(v[i], "-", v[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

// Quotes a word for a shell when it needs it.
std::string ShellQuote(const std::string& w) {
  if (!w.empty() && std::all_of(w.begin(), w.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
               std::strchr("-_./=:,+@%", c) != nullptr;
      })) {
    return w;
  }
  std::string q = "'";
  for (char c : w) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

std::string JoinCommand(const Json& command) {
  if (command.is_string()) return command.get<std::string>();
  if (!command.is_array()) return "-";
  std::vector<std::string> words;
  for (const Json& w : command) {
    words.push_back(
        ShellQuote(w.is_string() ? w.get<std::string>() : w.dump()));
  }
  return words.empty() ? "-" : absl::StrJoin(words, " ");
}

// --- YAML ---

bool YamlReadsAsNonString(const std::string& s) {
  YAML::Node node(s);
  bool b;
  double d;
  return YAML::convert<bool>::decode(node, b) ||
         YAML::convert<double>::decode(node, d);
}

void EmitYaml(YAML::Emitter& e, const Json& j) {
  switch (j.type()) {
    case Json::value_t::object:
      if (j.empty()) {
        e << YAML::Flow << YAML::BeginMap << YAML::EndMap;
        return;
      }
      e << YAML::BeginMap;
      for (const auto& [k, v] : j.items()) {
        e << YAML::Key << k << YAML::Value;
        EmitYaml(e, v);
      }
      e << YAML::EndMap;
      return;
    case Json::value_t::array:
      if (j.empty()) {
        e << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        return;
      }
      e << YAML::BeginSeq;
      for (const Json& v : j) EmitYaml(e, v);
      e << YAML::EndSeq;
      return;
    case Json::value_t::string: {
      const std::string& s = j.get_ref<const std::string&>();
      if (YamlReadsAsNonString(s)) e << YAML::DoubleQuoted;
      e << s;
      return;
    }
    case Json::value_t::boolean:
      e << j.get<bool>();
      return;
    case Json::value_t::number_integer:
      e << j.get<int64_t>();
      return;
    case Json::value_t::number_unsigned:
      e << j.get<uint64_t>();
      return;
    case Json::value_t::number_float:
      e << j.dump();
      return;
    default:
      e << YAML::Null;
      return;
  }
}

// --- Running verbs ---

// What every verb shares while it runs.
struct Verb {
  std::string name;
  const JobCommandFlags& flags;
  const CommandContext& ctx;

  std::ostream& out() const { return *ctx.out; }
  std::ostream& err() const { return *ctx.err; }

  int Fail(int code, absl::string_view message) const {
    err() << "loom " << name << ": " << message << "\n";
    return code;
  }
  int Fail(int code, const absl::Status& status) const {
    return Fail(code, status.message());
  }
  // A failed request about job `id`: names the job unless the server's
  // message already does.
  int FailJob(int64_t id, const absl::Status& status) const {
    const std::string m = S(status.message());
    if (absl::StrContains(m, absl::StrCat("job ", id))) {
      return Fail(kExitFailed, m);
    }
    return Fail(kExitFailed, absl::StrCat("job ", id, ": ", m));
  }

  // Prints `j` as -o asks (json or yaml); returns false for table output.
  bool PrintStructured(const Json& j) const {
    if (flags.output == "json") {
      out() << j.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
      return true;
    }
    if (flags.output == "yaml") {
      out() << JsonToYaml(j);
      return true;
    }
    return false;
  }
};

std::string CurrentUser(const GetEnvFn& getenv) {
  if (std::optional<std::string> u = getenv("USER");
      u.has_value() && !u->empty()) {
    return *u;
  }
  if (const passwd* pw = getpwuid(getuid()); pw != nullptr) {
    return pw->pw_name;
  }
  return "";
}

// Finds the servers and makes a client; prints the error and returns null
// when no server is configured.
std::unique_ptr<ApiClient> MakeClient(const Verb& v) {
  absl::StatusOr<ServerList> servers =
      DiscoverServers(v.flags.server, v.ctx.getenv);
  if (!servers.ok()) {
    v.Fail(kExitUsage, servers.status());
    return nullptr;
  }
  ApiClientOptions options;
  options.user = CurrentUser(v.ctx.getenv);
  absl::StatusOr<std::string> token =
      DiscoverToken(v.flags.token_file, v.ctx.getenv);
  if (!token.ok()) {
    v.Fail(kExitUsage, token.status());
    return nullptr;
  }
  options.token = *std::move(token);
  if (std::optional<std::string> ca = v.ctx.getenv("LOOM_CA_CERT");
      ca.has_value()) {
    options.ca_cert = *ca;
  }
  return std::make_unique<ApiClient>(std::move(servers->urls), options);
}

int64_t JobId(const Json& job) { return Int(job, "id").value_or(0); }

void PrintSubmitted(const Verb& v, const Json& job) {
  const int64_t id = JobId(job);
  v.out() << "submitted job " << id;
  if (Str(job, "state") == "held") {
    v.out() << " (held; start it with `loom release " << id << "`)";
  }
  v.out() << "\n";
}

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  std::stringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
    return text.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  text << in.rdbuf();
  return text.str();
}

int Submit(const Verb& v) {
  // Every file is read and checked before anything is sent: a bad spec
  // submits nothing.
  std::vector<Json> bodies;
  for (const std::string& file : v.flags.files) {
    const std::string source = file == "-" ? "<stdin>" : file;
    absl::StatusOr<std::string> text = ReadInput(file);
    if (!text.ok()) return v.Fail(kExitUsage, text.status());
    absl::StatusOr<JobSpec> spec = ParseJobSpec(*text, source);
    if (!spec.ok()) return v.Fail(kExitUsage, spec.status());
    if (v.flags.hold) spec->hold = true;
    bodies.push_back(Json::parse(JobSpecToJson(*spec), nullptr, false));
  }
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  // In order, over one connection; a refused job does not stop the others.
  int rc = kExitOk;
  Json jobs = Json::array();
  for (size_t i = 0; i < bodies.size(); ++i) {
    absl::StatusOr<Json> job = client->SubmitJob(bodies[i]);
    if (!job.ok()) {
      rc = v.Fail(kExitFailed, bodies.size() == 1
                                   ? S(job.status().message())
                                   : absl::StrCat(v.flags.files[i], ": ",
                                                  S(job.status().message())));
      continue;
    }
    if (bodies.size() == 1) {
      if (!v.PrintStructured(*job)) PrintSubmitted(v, *job);
    } else if (v.flags.output.empty()) {
      PrintSubmitted(v, *job);
    } else {
      jobs.push_back(*std::move(job));
    }
  }
  if (bodies.size() > 1 && !v.flags.output.empty()) {
    v.PrintStructured(Json{{"jobs", std::move(jobs)}});
  }
  return rc;
}

// Waits in slices so that Ctrl-C is noticed quickly; false when interrupted.
bool SleepUnlessInterrupted(const CommandContext& ctx) {
  const absl::Time until = absl::Now() + ctx.poll_interval;
  while (true) {
    if (ctx.interrupted != nullptr && ctx.interrupted->load()) return false;
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return true;
    std::this_thread::sleep_for(
        absl::ToChronoMilliseconds(std::min(left, absl::Milliseconds(50))));
  }
}

std::string StateLine(const Json& job) {
  const int64_t id = JobId(job);
  const std::string state = Str(job, "state");
  std::string line = absl::StrCat("job ", id, " is ", state);
  if (state == "running" || state == "stopping") {
    if (const Json* p = Field(job, "placement"); p != nullptr) {
      std::vector<std::string> nodes;
      for (const Json& t : Items(*p, "tasks")) {
        const std::string n = Str(t, "node");
        if (!n.empty() &&
            std::find(nodes.begin(), nodes.end(), n) == nodes.end()) {
          nodes.push_back(n);
        }
      }
      if (!nodes.empty()) {
        absl::StrAppend(&line, " on ", absl::StrJoin(nodes, ","));
      }
    }
  } else if (const std::string reason = Str(job, "reason"); !reason.empty()) {
    absl::StrAppend(&line, ": ", reason);
  }
  return line;
}

// `loom run --wait`: polls the job until it ends.
int WaitForJob(const Verb& v, ApiClient& client, int64_t id) {
  std::string last_line;
  bool warned = false;
  while (true) {
    if (v.ctx.interrupted != nullptr && v.ctx.interrupted->load()) break;
    absl::StatusOr<Json> job = client.GetJob(id);
    if (!job.ok()) {
      if (job.status().code() != absl::StatusCode::kUnavailable) {
        return v.FailJob(id, job.status());
      }
      if (!warned) {
        v.err() << "loom run: " << job.status().message()
                << "; still waiting for job " << id << "\n";
        warned = true;
      }
    } else {
      warned = false;
      const std::string state = Str(*job, "state");
      if (IsFinalJobState(state)) {
        const int code = WaitExitCode(*job);
        std::string line = absl::StrCat("job ", id, " ", state);
        if (state != "succeeded")
          absl::StrAppend(&line, " (exit status ", code, ")");
        if (const std::string reason = Str(*job, "reason");
            !reason.empty() && state != "succeeded") {
          absl::StrAppend(&line, ": ", reason);
        }
        v.err() << line << "\n";
        v.PrintStructured(*job);
        return code;
      }
      std::string line = StateLine(*job);
      if (line != last_line) {
        v.err() << line << "\n";
        last_line = std::move(line);
      }
    }
    if (!SleepUnlessInterrupted(v.ctx)) break;
  }
  v.err() << "loom run: interrupted; job " << id
          << " keeps running (cancel it with `loom cancel " << id << "`)\n";
  return kExitInterrupted;
}

int Run(const Verb& v) {
  absl::StatusOr<Json> spec = BuildRunSpec(v.flags.run);
  if (!spec.ok()) return v.Fail(kExitUsage, spec.status());
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  absl::StatusOr<Json> job = client->SubmitJob(*spec);
  if (!job.ok()) return v.Fail(kExitFailed, job.status());
  if (!v.flags.run.wait) {
    if (!v.PrintStructured(*job)) PrintSubmitted(v, *job);
    return kExitOk;
  }
  if (v.flags.output.empty()) PrintSubmitted(v, *job);
  v.out().flush();
  return WaitForJob(v, *client, JobId(*job));
}

int Release(const Verb& v) {
  if (v.flags.all == !v.flags.jobs.empty()) {
    return v.Fail(kExitUsage, "give job IDs or --all (your held jobs)");
  }
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  std::vector<int64_t> ids = v.flags.jobs;
  if (v.flags.all) {
    const std::string user = CurrentUser(v.ctx.getenv);
    JobFilter filter;
    filter.states = {"held"};
    filter.user = user;
    absl::StatusOr<Json> held = client->ListJobs(filter);
    if (!held.ok()) return v.Fail(kExitFailed, held.status());
    for (const Json& job : Items(*held, "jobs")) ids.push_back(JobId(job));
    if (ids.empty()) {
      v.out() << "no held jobs" << (user.empty() ? "" : " of " + user) << "\n";
      return kExitOk;
    }
  }
  if (ids.size() == 1) {
    absl::StatusOr<Json> job = client->ReleaseJob(ids[0]);
    if (!job.ok()) return v.FailJob(ids[0], job.status());
    v.out() << "released job " << ids[0] << "\n";
    return kExitOk;
  }
  // Several: one request, one write on the server.
  absl::StatusOr<Json> reply = client->ReleaseJobs(ids);
  if (!reply.ok()) return v.Fail(kExitFailed, reply.status());
  int rc = kExitOk;
  for (const Json& id : Items(*reply, "released")) {
    v.out() << "released job " << id.dump() << "\n";
  }
  for (const Json& e : Items(*reply, "errors")) {
    const Json* msg =
        e.contains("error") ? Field(e["error"], "message") : nullptr;
    rc = v.FailJob(JobId(e),
                   absl::UnknownError(msg != nullptr && msg->is_string()
                                          ? msg->get<std::string>()
                                          : e.dump()));
  }
  return rc;
}

int Queue(const Verb& v) {
  JobFilter filter;
  if (!v.flags.state.empty()) {
    for (absl::string_view s :
         absl::StrSplit(v.flags.state, ',', absl::SkipWhitespace())) {
      const std::string state =
          absl::AsciiStrToLower(absl::StripAsciiWhitespace(s));
      if (std::find(std::begin(kJobStates), std::end(kJobStates), state) ==
          std::end(kJobStates)) {
        return v.Fail(
            kExitUsage,
            absl::StrCat("--state: unknown state '", state, "' (one of ",
                         absl::StrJoin(kJobStates, ", "), ")"));
      }
      filter.states.push_back(state);
    }
  } else if (!v.flags.all) {
    filter.states = {"held", "pending", "running", "stopping"};
  }
  filter.project = v.flags.project;
  filter.user = v.flags.user;
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  absl::StatusOr<Json> jobs = client->ListJobs(filter);
  if (!jobs.ok()) return v.Fail(kExitFailed, jobs.status());
  if (!v.PrintStructured(*jobs)) {
    v.out() << FormatJobTable(*jobs, v.flags.output == "wide", v.ctx.now());
  }
  return kExitOk;
}

int Show(const Verb& v) {
  const int64_t id = v.flags.jobs.at(0);
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  absl::StatusOr<Json> job = client->GetJob(id);
  if (!job.ok()) return v.FailJob(id, job.status());
  if (Field(*job, "events") == nullptr) {
    if (absl::StatusOr<Json> events = client->JobEvents(id); events.ok()) {
      (*job)["events"] = Items(*events, "events");
    }
  }
  if (!v.PrintStructured(*job)) {
    v.out() << FormatJobDetails(*job, v.ctx.now());
  }
  return kExitOk;
}

int Logs(const Verb& v) {
  const int64_t id = v.flags.jobs.at(0);
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  LogRequest request;
  request.task = v.flags.task;
  request.process = v.flags.process;
  request.stream = v.flags.stderr_stream ? "stderr" : "stdout";
  request.follow = v.flags.follow;
  absl::Status st = client->StreamLogs(id, request, [&](std::string_view c) {
    v.out().write(c.data(), static_cast<std::streamsize>(c.size()));
    v.out().flush();
    return static_cast<bool>(v.out());
  });
  // Cancelled: standard output was closed (`loom logs -f JOB | head`).
  if (!st.ok() && st.code() != absl::StatusCode::kCancelled) {
    return v.FailJob(id, st);
  }
  return kExitOk;
}

int Cancel(const Verb& v) {
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  int rc = kExitOk;
  for (int64_t id : v.flags.jobs) {
    absl::StatusOr<Json> job = client->CancelJob(id);
    if (!job.ok()) {
      rc = v.FailJob(id, job.status());
      continue;
    }
    const std::string state = Str(*job, "state");
    if (state == "stopping") {
      v.out() << "job " << id
              << " is stopping (its tasks were signalled; it becomes "
                 "cancelled when they have exited)\n";
    } else if (state == "succeeded" || state == "failed") {
      v.out() << "job " << id << " had already finished (" << state << ")\n";
    } else {
      v.out() << "cancelled job " << id << "\n";
    }
  }
  return rc;
}

int Checkpoint(const Verb& v) {
  int64_t id = v.flags.jobs.empty() ? 0 : v.flags.jobs[0];
  if (id == 0) {
    // Inside a task: the job is the task's own.
    std::optional<std::string> env = v.ctx.getenv("LOOM_JOB_ID");
    absl::StatusOr<int64_t> parsed =
        env ? ParseJobId(*env)
            : absl::StatusOr<int64_t>(absl::NotFoundError(""));
    if (parsed.ok()) id = *parsed;
    if (!parsed.ok()) {
      return v.Fail(kExitUsage,
                    "give the job ID (inside a task, LOOM_JOB_ID is used)");
    }
  }
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  absl::StatusOr<Json> job = client->ReportCheckpoint(id, v.flags.step);
  if (!job.ok()) return v.FailJob(id, job.status());
  v.out() << "job " << id << ": checkpoint recorded"
          << (v.flags.step >= 0 ? absl::StrCat(" (step ", v.flags.step, ")")
                                : std::string())
          << "\n";
  return kExitOk;
}

int Nodes(const Verb& v) {
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  absl::StatusOr<Json> nodes = client->ListNodes();
  if (!nodes.ok()) return v.Fail(kExitFailed, nodes.status());
  if (!v.PrintStructured(*nodes)) {
    v.out() << FormatNodeTable(*nodes, v.flags.output == "wide", v.ctx.now());
  }
  return kExitOk;
}

int NodeAction(const Verb& v) {
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  const std::string& node = v.flags.node;
  absl::StatusOr<Json> answer = v.name == "cordon" ? client->CordonNode(node)
                                : v.name == "uncordon"
                                    ? client->UncordonNode(node)
                                    : client->DrainNode(node);
  if (!answer.ok()) return v.Fail(kExitFailed, answer.status());
  const std::string state = Str(*answer, "state");
  if (v.name == "cordon") {
    v.out() << "node " << node << " cordoned (no new work)\n";
  } else if (v.name == "uncordon") {
    v.out() << "node " << node << " uncordoned"
            << (state.empty() ? "" : " (" + state + ")") << "\n";
  } else if (state == "drained") {
    v.out() << "node " << node << " drained (no jobs were running on it)\n";
  } else {
    const size_t jobs = Items(*answer, "jobs").size();
    v.out() << "node " << node << " is draining: no new work";
    if (jobs > 0) {
      v.out() << "; drained when its " << jobs << " job"
              << (jobs == 1 ? "" : "s") << " end";
    } else {
      v.out() << "; drained when its jobs end";
    }
    v.out() << "\n";
  }
  return kExitOk;
}

}  // namespace

std::string FormatTop(const Json& nodes_answer, const Json& jobs_answer,
                      const std::string& server, int width, int rows,
                      absl::Time now) {
  const std::vector<Json> nodes = Items(nodes_answer, "nodes");
  const std::vector<Json> jobs = Items(jobs_answer, "jobs");
  width = std::max(width, 40);
  int64_t total = 0, allocated = 0;
  std::map<std::string, int> states;
  for (const Json& n : nodes) {
    total += Int(n, "gpus").value_or(0);
    allocated += Int(n, "gpus_allocated").value_or(0);
    ++states[Str(n, "state")];
  }
  std::vector<Json> waiting, running;
  for (const Json& j : jobs) {
    const std::string s = Str(j, "state");
    if (s == "pending" || s == "held") waiting.push_back(j);
    if (s == "running" || s == "stopping") running.push_back(j);
  }
  std::string out =
      absl::StrCat("loom top  ", server, "  ", FormatUtc(now), "\n");
  const int bar = std::max(10, width - 40);
  const int filled = total > 0 ? static_cast<int>(bar * allocated / total) : 0;
  absl::StrAppend(&out, "GPUs   ", allocated, "/", total, " allocated (",
                  total > 0 ? 100 * allocated / total : 0, "%)  [",
                  std::string(filled, '#'), std::string(bar - filled, '.'),
                  "]\n");
  std::string node_line = absl::StrCat("Nodes  ", nodes.size());
  for (const char* s : {"up", "suspect", "cordoned", "draining", "drained",
                        "down", "unknown"}) {
    if (auto it = states.find(s); it != states.end()) {
      absl::StrAppend(&node_line, ", ", it->second, " ", s);
    }
  }
  absl::StrAppend(&out, node_line, "\n");
  absl::StrAppend(&out, "Jobs   ", running.size(), " running, ", waiting.size(),
                  " waiting\n\n");
  // The node map, by leaf.
  absl::StrAppend(&out,
                  "Nodes by leaf: # full + half - some . idle d drained s "
                  "suspect X down ? unknown\n");
  std::vector<std::pair<std::string, std::string>> leaves;
  for (const Json& n : nodes) {
    const std::string leaf = Str(n, "leaf");
    if (leaves.empty() || leaves.back().first != leaf) {
      leaves.emplace_back(leaf, "");
    }
    const std::string s = Str(n, "state");
    const int64_t g = Int(n, "gpus").value_or(0);
    const int64_t a = Int(n, "gpus_allocated").value_or(0);
    char c = '.';
    if (s == "down") {
      c = 'X';
    } else if (s == "unknown") {
      c = '?';
    } else if (s == "suspect") {
      c = 's';
    } else if (s == "drained" || s == "draining" || s == "cordoned") {
      c = 'd';
    } else if (g > 0 && a == g) {
      c = '#';
    } else if (g > 0 && 2 * a >= g) {
      c = '+';
    } else if (a > 0) {
      c = '-';
    }
    leaves.back().second.push_back(c);
  }
  size_t name_width = 0;
  for (const auto& [leaf, map] : leaves) {
    name_width = std::max(name_width, leaf.size());
  }
  const size_t cell =
      name_width + 2 + (leaves.empty() ? 0 : leaves.front().second.size()) + 2;
  const size_t per_line = std::max<size_t>(
      1, static_cast<size_t>(width) / std::max<size_t>(cell, 1));
  std::string line;
  for (size_t i = 0; i < leaves.size(); ++i) {
    std::string entry = leaves[i].first;
    entry.resize(name_width + 2, ' ');
    absl::StrAppend(&entry, leaves[i].second);
    if (i % per_line != 0) line += "  ";
    line += entry;
    if (i % per_line == per_line - 1 || i + 1 == leaves.size()) {
      absl::StrAppend(&out, line, "\n");
      line.clear();
    }
  }
  auto trim = [&](std::string s) {
    if (static_cast<int>(s.size()) > width) s.resize(width);
    return s;
  };
  absl::StrAppend(&out, "\nWaiting (", waiting.size(), ")\n");
  std::vector<std::vector<std::string>> table;
  for (size_t i = 0; i < waiting.size() && static_cast<int>(i) < rows; ++i) {
    const Json& j = waiting[i];
    table.push_back({Cell(j, "id"), Cell(j, "name"), Cell(j, "user"),
                     Cell(j, "gpus"), Cell(j, "reason")});
  }
  if (!table.empty()) {
    for (absl::string_view l : absl::StrSplit(
             FormatTable({"JOBID", "NAME", "USER", "GPUS", "REASON"}, table),
             '\n', absl::SkipEmpty())) {
      absl::StrAppend(&out, trim(std::string(l)), "\n");
    }
  }
  std::sort(running.begin(), running.end(), [](const Json& a, const Json& b) {
    return Int(a, "gpus").value_or(0) > Int(b, "gpus").value_or(0);
  });
  absl::StrAppend(&out, "\nRunning (", running.size(), ", largest first)\n");
  table.clear();
  for (size_t i = 0; i < running.size() && static_cast<int>(i) < rows; ++i) {
    const Json& j = running[i];
    std::string time = "-";
    if (std::optional<absl::Time> start = TimeField(j, "start_time")) {
      time = FormatElapsed(now - *start);
    }
    const Json* placement = Field(j, "placement");
    table.push_back({Cell(j, "id"), Cell(j, "name"), Cell(j, "user"),
                     Cell(j, "gpus"), time,
                     placement != nullptr && placement->is_object()
                         ? DescribeSwitchSpan(*placement)
                         : "-"});
  }
  if (!table.empty()) {
    for (absl::string_view l : absl::StrSplit(
             FormatTable({"JOBID", "NAME", "USER", "GPUS", "TIME", "PLACED ON"},
                         table),
             '\n', absl::SkipEmpty())) {
      absl::StrAppend(&out, trim(std::string(l)), "\n");
    }
  }
  return out;
}

namespace {

int Top(const Verb& v) {
  absl::StatusOr<absl::Duration> interval = ParseDuration(v.flags.interval);
  if (!interval.ok() || *interval < absl::Milliseconds(200)) {
    return v.Fail(kExitUsage, "--interval: a duration of at least 200ms");
  }
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  int width = 100;
  if (std::optional<std::string> cols = v.ctx.getenv("COLUMNS")) {
    int c = 0;
    if (absl::SimpleAtoi(*cols, &c) && c >= 40) width = c;
  }
  while (true) {
    absl::StatusOr<Json> nodes = client->ListNodes();
    if (!nodes.ok()) return v.Fail(kExitFailed, nodes.status());
    JobFilter filter;
    filter.states = {"held", "pending", "running", "stopping"};
    absl::StatusOr<Json> jobs = client->ListJobs(filter);
    if (!jobs.ok()) return v.Fail(kExitFailed, jobs.status());
    const std::string screen = FormatTop(
        *nodes, *jobs, client->server_urls().front(), width, 10, v.ctx.now());
    if (v.flags.once) {
      v.out() << screen;
      return kExitOk;
    }
    v.out() << "\x1b[H\x1b[2J" << screen << std::flush;  // clear, home
    const absl::Time until = absl::Now() + *interval;
    while (absl::Now() < until) {
      if (v.ctx.interrupted != nullptr && v.ctx.interrupted->load()) {
        return kExitOk;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
}

// `loom chaos ACTION TARGET [VALUE]`: fault injection for drills and tests.
int Chaos(const Verb& v) {
  const std::string& action = v.flags.chaos_action;
  const std::string& target = v.flags.chaos_target;
  const std::string& value = v.flags.chaos_value;
  Json fault;
  int64_t n = 0;
  if (action == "kill-task") {
    absl::StatusOr<int64_t> job = ParseJobId(target);
    if (!job.ok()) {
      return v.Fail(kExitUsage, absl::StrCat("kill-task: give a job ID (",
                                             job.status().message(), ")"));
    }
    fault = {{"action", "kill_task"}, {"job", *job}, {"task", v.flags.task}};
  } else if (action == "kill-agent" || action == "freeze" || action == "thaw" ||
             action == "heal") {
    fault = {{"action", action == "kill-agent" ? "kill_agent"
                        : action == "freeze"   ? "freeze_heartbeats"
                        : action == "thaw"     ? "thaw_heartbeats"
                                               : "heal"},
             {"node", target}};
  } else if (action == "fail-gpu" || action == "heal-gpu") {
    if (!absl::SimpleAtoi(value, &n) || n < 0) {
      return v.Fail(kExitUsage, absl::StrCat(action, ": give NODE GPU_INDEX"));
    }
    fault = {{"action", action == "fail-gpu" ? "fail_gpu" : "heal_gpu"},
             {"node", target},
             {"gpu", n}};
  } else if (action == "slow") {
    absl::StatusOr<absl::Duration> d = ParseDuration(value);
    if (!d.ok() || *d < absl::ZeroDuration()) {
      return v.Fail(kExitUsage,
                    "slow: give NODE DELAY (e.g. 500ms; 0 ends the delay)");
    }
    fault = {{"action", "slow_agent"},
             {"node", target},
             {"delay_ms", absl::ToInt64Milliseconds(*d)}};
  } else {
    return v.Fail(kExitUsage,
                  absl::StrCat("unknown chaos action '", action,
                               "': kill-agent, freeze, thaw, kill-task, "
                               "fail-gpu, heal-gpu, slow, heal"));
  }
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  absl::StatusOr<Json> answer = client->Chaos(fault);
  if (!answer.ok()) return v.Fail(kExitFailed, answer.status());
  v.out() << "chaos: " << action << " " << target
          << (value.empty() ? "" : " " + value) << ": done"
          << (action == "kill-task"
                  ? absl::StrCat(" (task ", v.flags.task, " on node ",
                                 Str(*answer, "node"), ")")
                  : std::string())
          << "\n";
  return kExitOk;
}

int WhoAmI(const Verb& v) {
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  absl::StatusOr<Json> me = client->WhoAmI();
  if (!me.ok()) return v.Fail(kExitFailed, me.status());
  if (!v.PrintStructured(*me)) {
    v.out() << Cell(*me, "user") << " (" << Cell(*me, "role") << "; token "
            << Cell(*me, "token") << "; projects "
            << (me->contains("projects") && !(*me)["projects"].empty()
                    ? absl::StrJoin(
                          (*me)["projects"].get<std::vector<std::string>>(),
                          ",")
                    : std::string("-"))
            << ")\n";
  }
  return kExitOk;
}

int Token(const Verb& v) {
  const JobCommandFlags& f = v.flags;
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  if (f.token_action == "list") {
    absl::StatusOr<Json> tokens = client->ListTokens();
    if (!tokens.ok()) return v.Fail(kExitFailed, tokens.status());
    if (v.PrintStructured(*tokens)) return kExitOk;
    std::vector<std::vector<std::string>> rows;
    for (const Json& t : Items(*tokens, "tokens")) {
      std::string state = t.value("revoked", false) ? "revoked"
                          : t.value("used", false)  ? "used"
                                                    : "active";
      std::optional<int64_t> expires = Int(t, "expires");
      if (state == "active" && expires &&
          absl::FromUnixSeconds(*expires) <= v.ctx.now()) {
        state = "expired";
      }
      std::string projects = "-";
      if (t.contains("projects") && t["projects"].is_array() &&
          !t["projects"].empty()) {
        projects =
            absl::StrJoin(t["projects"].get<std::vector<std::string>>(), ",");
      }
      rows.push_back(
          {Cell(t, "id"), Cell(t, "role"),
           t.value("user", std::string()).empty() ? "-" : Cell(t, "user"),
           projects, state,
           expires ? absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                                      absl::FromUnixSeconds(*expires),
                                      absl::UTCTimeZone())
                   : "-",
           t.value("description", std::string()).empty()
               ? "-"
               : Cell(t, "description")});
    }
    v.out() << FormatTable(
        {"ID", "ROLE", "USER", "PROJECTS", "STATE", "EXPIRES", "DESCRIPTION"},
        rows);
    return kExitOk;
  }
  if (f.token_action == "revoke") {
    if (!f.token_node.empty()) {
      absl::StatusOr<Json> r = client->RevokeNode(f.token_node);
      if (!r.ok()) return v.Fail(kExitFailed, r.status());
      v.out() << "revoked the credential of node " << f.token_node << "\n";
      return kExitOk;
    }
    if (f.token_id.empty()) {
      return v.Fail(kExitUsage, "token revoke: give a token ID or --node NAME");
    }
    absl::StatusOr<Json> r = client->RevokeToken(f.token_id);
    if (!r.ok()) return v.Fail(kExitFailed, r.status());
    v.out() << "revoked token " << f.token_id << "\n";
    return kExitOk;
  }
  if (f.token_action != "create") {
    return v.Fail(kExitUsage, absl::StrCat("token: '", f.token_action,
                                           "' is not create, list or revoke"));
  }
  Json request = {{"role", f.token_join ? std::string("join") : f.token_role},
                  {"description", f.token_description}};
  if (f.token_join) {
    // Single-use unless --reusable; --nodes binds it to those names.
    if (f.token_reusable) request["reusable"] = true;
    if (!f.token_nodes.empty()) request["nodes"] = f.token_nodes;
  } else {
    if (f.token_reusable || !f.token_nodes.empty()) {
      return v.Fail(kExitUsage, "--reusable and --nodes go with --join");
    }
    request["user"] = f.token_user;
    request["projects"] = f.token_projects;
  }
  if (!f.token_ttl.empty()) {
    absl::StatusOr<absl::Duration> ttl = ParseDuration(f.token_ttl);
    if (!ttl.ok()) {
      return v.Fail(kExitUsage,
                    absl::StrCat("--ttl: ", ttl.status().message()));
    }
    request["ttl_seconds"] = absl::ToDoubleSeconds(*ttl);
  }
  absl::StatusOr<Json> made = client->CreateToken(request);
  if (!made.ok()) return v.Fail(kExitFailed, made.status());
  if (v.PrintStructured(*made)) return kExitOk;
  // The token alone on stdout (for `> file` and $(...)); the rest on stderr.
  v.out() << Str(*made, "token") << "\n";
  v.err() << "token " << Cell(*made, "id") << " (" << Cell(*made, "role")
          << (f.token_join ? "" : absl::StrCat(" ", f.token_user))
          << "): shown only now; keep it secret\n";
  return kExitOk;
}

int Projects(const Verb& v) {
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  absl::StatusOr<Json> projects = client->ListProjects();
  if (!projects.ok()) return v.Fail(kExitFailed, projects.status());
  if (!v.PrintStructured(*projects)) {
    v.out() << FormatProjectTable(*projects);
  }
  return kExitOk;
}

std::atomic<bool> g_interrupted{false};

void OnInterrupt(int) { g_interrupted.store(true); }

// `--server` and `-o` on a verb.
void AddServerFlag(CLI::App* verb, JobCommandFlags* f) {
  verb->add_option("--server", f->server,
                   "Server URL(s), comma-separated (default: $LOOM_SERVER, "
                   "then `server:` in $LOOM_CONFIG or "
                   "~/.config/loom/config.yaml)");
  verb->add_option("--token-file", f->token_file,
                   "File holding the API token (default: $LOOM_TOKEN, "
                   "$LOOM_TOKEN_FILE, `token_file:` in the config file, "
                   "~/.config/loom/token)");
}

void AddOutputFlag(CLI::App* verb, JobCommandFlags* f,
                   std::vector<std::string> formats) {
  const std::string names = absl::StrJoin(formats, "|");
  verb->add_option("-o,--output", f->output,
                   absl::StrCat("Output format: ", names))
      ->check(CLI::IsMember(std::move(formats)));
}

CLI::App* AddVerb(CLI::App& app, JobCommandFlags* f, const std::string& name,
                  const std::string& description) {
  CLI::App* verb = app.add_subcommand(name, description);
  f->verbs.emplace_back(name, verb);
  AddServerFlag(verb, f);
  return verb;
}

constexpr char kExitFooter[] =
    "Exit status: 0 ok, 1 the request failed at the server or on the "
    "network, 2 bad usage or input. See docs/cli.md.";

}  // namespace

// --- Pure parts ---

std::string DefaultJobName(const std::vector<std::string>& command) {
  std::string base = command.empty() ? "" : command[0];
  while (!base.empty() && base.back() == '/') base.pop_back();
  if (const size_t slash = base.rfind('/'); slash != std::string::npos) {
    base = base.substr(slash + 1);
  }
  std::string name;
  for (char c : absl::AsciiStrToLower(base)) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      name += c;
    } else if (!name.empty() && name.back() != '-') {
      name += '-';
    }
  }
  while (!name.empty() && name.back() == '-') name.pop_back();
  if (name.empty()) return "job";
  if (!(name[0] >= 'a' && name[0] <= 'z')) name = "job-" + name;
  if (name.size() > 63) name.resize(63);
  while (name.back() == '-') name.pop_back();
  return name;
}

absl::StatusOr<nlohmann::json> BuildRunSpec(const RunFlags& f) {
  if (f.command.empty()) {
    return absl::InvalidArgumentError(
        "no command given (loom run -g N [flags] -- CMD [ARGS...])");
  }
  if (f.gpus < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("-g: the number of GPUs in total must be at least 1, "
                     "got ",
                     f.gpus));
  }
  if (f.nodes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nodes: must be at least 1, got ", f.nodes));
  }
  if (f.nodes > 0 && f.gpus % f.nodes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("-g ", f.gpus,
                     " GPUs cannot be spread evenly over "
                     "--nodes ",
                     f.nodes, " (give a multiple of the node count)"));
  }
  if (f.procs_per_node < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--procs-per-node: must be at least 1, got ", f.procs_per_node));
  }
  JobSpec spec;
  spec.name = f.name.empty() ? DefaultJobName(f.command) : f.name;
  if (!f.project.empty()) spec.project = f.project;
  if (!f.gpu_model.empty()) spec.gpu_model = absl::AsciiStrToLower(f.gpu_model);
  spec.gpus = f.gpus;
  spec.nodes = f.nodes;
  if (!f.time_limit.empty()) {
    absl::StatusOr<absl::Duration> limit = ParseDuration(f.time_limit);
    if (!limit.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--time-limit: ", S(limit.status().message())));
    }
    if (*limit <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--time-limit: must be longer than 0, got '", f.time_limit, "'"));
    }
    spec.time_limit = *limit;
  }
  if (f.procs_per_node > 0) spec.processes_per_task = f.procs_per_node;
  for (const std::string& kv : f.env) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--env: '", kv, "' is not NAME=VALUE"));
    }
    spec.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  spec.hold = f.hold;
  spec.command = f.command;

  // The spec parser is the one judge of a valid spec: read the JSON back
  // and report its errors under the flags' names.
  const std::string text = JobSpecToJson(spec);
  constexpr absl::string_view kSource = "loom run";
  if (absl::StatusOr<JobSpec> check = ParseJobSpec(text, "loom run");
      !check.ok()) {
    std::string m = S(check.status().message());
    if (absl::StartsWith(m, kSource)) {  // drop "loom run:1:23: "
      const size_t space = m.find(": ");
      if (space != std::string::npos) m = m.substr(space + 2);
    }
    static const std::pair<const char*, const char*> kFlagOf[] = {
        {"name: ", "--name: "},
        {"project: ", "--project: "},
        {"resources.gpu_model: ", "--gpu-model: "},
        {"resources.gpus: ", "-g: "},
        {"resources.nodes: ", "--nodes: "},
        {"resources.processes_per_task: ", "--procs-per-node: "},
        {"env.", "--env "},
        {"time_limit: ", "--time-limit: "},
        {"command", "command"},
    };
    for (const auto& [field, flag] : kFlagOf) {
      if (absl::StartsWith(m, field)) {
        m = absl::StrCat(flag, m.substr(std::strlen(field)));
        break;
      }
    }
    return absl::InvalidArgumentError(m);
  }
  return Json::parse(text, nullptr, false);
}

bool IsFinalJobState(std::string_view state) {
  return state == "succeeded" || state == "failed" || state == "cancelled";
}

int WaitExitCode(const nlohmann::json& job) {
  if (Str(job, "state") == "succeeded") return 0;
  // The code that one object (the job or a task) reports, or 0.
  auto code_of = [](const Json& o) -> int {
    if (std::optional<int64_t> sig = Int(o, "signal"); sig && *sig > 0) {
      return static_cast<int>(128 + std::min<int64_t>(*sig, 127));
    }
    if (std::optional<int64_t> code = Int(o, "exit_code"); code) {
      if (*code < 0)
        return static_cast<int>(128 + std::min<int64_t>(-*code, 127));
      if (*code > 0) return static_cast<int>(std::min<int64_t>(*code, 255));
    }
    return 0;
  };
  if (int code = code_of(job); code != 0) return code;
  if (const Json* p = Field(job, "placement"); p != nullptr) {
    std::vector<const Json*> tasks;
    for (const Json& t : Items(*p, "tasks")) tasks.push_back(&t);
    std::stable_sort(
        tasks.begin(), tasks.end(), [](const Json* a, const Json* b) {
          return Int(*a, "index").value_or(0) < Int(*b, "index").value_or(0);
        });
    for (const Json* t : tasks) {
      if (int code = code_of(*t); code != 0) return code;
    }
  }
  return 1;
}

std::string FormatAgo(absl::Time t, absl::Time now) {
  absl::Duration d = now - t;
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  const int64_t s = absl::ToInt64Seconds(d);
  if (s < 60) return absl::StrCat(s, "s ago");
  if (s < 3600) return absl::StrCat(s / 60, "m ago");
  if (s < 86400) return absl::StrCat(s / 3600, "h ago");
  return absl::StrCat(s / 86400, "d ago");
}

std::string FormatElapsed(absl::Duration d) {
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  const int64_t s = absl::ToInt64Seconds(d);
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
}

std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  };
  measure(header);
  for (const auto& row : rows) measure(row);
  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      if (i + 1 == width.size()) {
        line += cell;
      } else {
        line += cell;
        line.append(width[i] - cell.size() + 2, ' ');
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };
  emit(header);
  for (const auto& row : rows) emit(row);
  return out;
}

std::string FormatJobTable(const nlohmann::json& jobs, bool wide,
                           absl::Time now) {
  std::vector<std::string> header = {"JOBID", "NAME", "USER",  "PROJECT",
                                     "STATE", "GPUS", "NODES", "TIME"};
  if (wide) {
    header.insert(header.end(), {"PRIORITY", "GPU_MODEL", "SUBMIT"});
  }
  header.push_back("REASON");
  std::vector<std::vector<std::string>> rows;
  for (const Json& job : Items(jobs, "jobs")) {
    std::optional<int64_t> gpus = Int(job, "gpus");
    if (!gpus.has_value()) {
      std::optional<int64_t> tasks = Int(job, "tasks");
      std::optional<int64_t> per = Int(job, "gpus_per_task");
      if (tasks && per) gpus = *tasks * *per;
    }
    std::optional<int64_t> nodes;
    if (const Json* p = Field(job, "placement"); p != nullptr) {
      nodes = Int(*p, "nodes");
    }
    if (!nodes.has_value()) nodes = Int(job, "tasks");
    std::string time = "-";
    if (std::optional<absl::Time> start = TimeField(job, "start_time")) {
      const absl::Time end = TimeField(job, "end_time").value_or(now);
      time = FormatElapsed(end - *start);
    }
    std::vector<std::string> row = {Cell(job, "id"),    Cell(job, "name"),
                                    Cell(job, "user"),  Cell(job, "project"),
                                    Cell(job, "state"), Cell(gpus),
                                    Cell(nodes),        time};
    if (wide) {
      std::optional<absl::Time> submit = TimeField(job, "submit_time");
      row.insert(row.end(), {Cell(job, "priority"), Cell(job, "gpu_model"),
                             submit ? FormatAgo(*submit, now) : "-"});
    }
    row.push_back(Cell(job, "reason"));
    rows.push_back(std::move(row));
  }
  return FormatTable(header, rows);
}

std::string FormatNodeTable(const nlohmann::json& nodes, bool wide,
                            absl::Time now) {
  std::vector<std::string> header = {"NAME",  "STATE",   "GPUS", "ALLOC",
                                     "MODEL", "ADDRESS", "JOBS"};
  if (wide) {
    header.insert(header.end(),
                  {"POOL", "LEAF", "CPUS", "MEMORY", "HEARTBEAT"});
  }
  header.push_back("REASON");
  std::vector<std::vector<std::string>> rows;
  for (const Json& node : Items(nodes, "nodes")) {
    std::vector<std::string> jobs;
    if (const Json* j = Field(node, "jobs"); j != nullptr && j->is_array()) {
      for (const Json& id : *j)
        jobs.push_back(id.is_string() ? id.get<std::string>() : id.dump());
    }
    std::vector<std::string> row = {
        Cell(node, "name"),
        Cell(node, "state"),
        Cell(node, "gpus"),
        Cell(node, "gpus_allocated"),
        Cell(node, "gpu_model"),
        Cell(node, "address"),
        jobs.empty() ? "-" : absl::StrJoin(jobs, ",")};
    if (wide) {
      std::optional<int64_t> memory = Int(node, "memory_bytes");
      std::optional<absl::Time> beat = TimeField(node, "last_heartbeat");
      row.insert(row.end(),
                 {Cell(node, "pool"), Cell(node, "leaf"), Cell(node, "cpus"),
                  memory ? FormatBytes(*memory) : "-",
                  beat ? FormatAgo(*beat, now) : "-"});
    }
    row.push_back(Cell(node, "reason"));
    rows.push_back(std::move(row));
  }
  return FormatTable(header, rows);
}

std::string FormatProjectTable(const nlohmann::json& projects) {
  std::vector<std::vector<std::string>> rows;
  for (const Json& p : Items(projects, "projects")) {
    std::optional<int64_t> quota = Int(p, "quota_gpus");
    std::optional<double> seconds = Num(p, "gpu_seconds");
    rows.push_back({Cell(p, "name"),
                    quota && *quota > 0 ? absl::StrCat(*quota) : "-",
                    Cell(p, "weight"), Cell(p, "running_gpus"),
                    Cell(p, "running_jobs"), Cell(p, "pending_jobs"),
                    seconds ? fmt::format("{:.1f}", *seconds / 3600.0) : "-"});
  }
  return FormatTable({"NAME", "QUOTA_GPUS", "WEIGHT", "RUNNING_GPUS", "RUNNING",
                      "PENDING", "GPU_HOURS"},
                     rows);
}

std::string DescribeSwitchSpan(const nlohmann::json& placement) {
  std::optional<int64_t> level = Int(placement, "switch_level");
  if (!level.has_value()) return "";
  const std::string name = Str(placement, "switch");
  if (*level <= 0) {
    std::string node = name;
    if (node.empty()) {
      const Json& tasks = Items(placement, "tasks");
      if (!tasks.empty()) node = Str(tasks[0], "node");
    }
    return node.empty() ? "one node" : absl::StrCat("one node (", node, ")");
  }
  static const char* const kLevelNames[] = {"node", "leaf", "spine", "core"};
  std::string s = absl::StrCat("one ",
                               *level < 4 ? std::string(kLevelNames[*level])
                                          : absl::StrCat("level-", *level),
                               " switch");
  if (!name.empty()) absl::StrAppend(&s, " (", name, ")");
  if (std::optional<int64_t> leaves = Int(placement, "leaves");
      *level >= 2 && leaves && *leaves > 1) {
    absl::StrAppend(&s, ", ", *leaves, " leaves");
  }
  return s;
}

std::string FormatJobDetails(const nlohmann::json& job, absl::Time now) {
  std::vector<std::pair<std::string, std::string>> lines;
  auto add = [&](std::string label, std::string value) {
    lines.emplace_back(std::move(label), std::move(value));
  };
  const std::string state = Str(job, "state");
  std::string title = Cell(job, "id");
  if (!Str(job, "name").empty())
    absl::StrAppend(&title, " (", Str(job, "name"), ")");
  add("Job", title);
  add("State", state.empty() ? "-" : state);
  if (!Str(job, "reason").empty()) {
    add(state == "pending" || state == "held" ? "Pending reason" : "Reason",
        Str(job, "reason"));
  }
  add("User", Cell(job, "user"));
  add("Project", Cell(job, "project"));
  std::string kind = Cell(job, "kind");
  if (!Str(job, "priority").empty()) {
    absl::StrAppend(&kind, ", priority ", Str(job, "priority"));
  }
  if (const Json* p = Field(job, "preemptible");
      p != nullptr && p->is_boolean()) {
    absl::StrAppend(&kind,
                    p->get<bool>() ? ", preemptible" : ", not preemptible");
  }
  add("Kind", kind);
  std::optional<int64_t> gpus = Int(job, "gpus");
  std::optional<int64_t> tasks = Int(job, "tasks");
  std::optional<int64_t> per = Int(job, "gpus_per_task");
  if (!gpus && tasks && per) gpus = *tasks * *per;
  std::string gpu_line =
      absl::StrCat(Cell(gpus), " x ", Cell(job, "gpu_model"));
  if (tasks && per) {
    absl::StrAppend(&gpu_line, " (", *tasks, " task", *tasks == 1 ? "" : "s",
                    " x ", *per, " GPU", *per == 1 ? "" : "s", ")");
  }
  add("GPUs", gpu_line);
  std::vector<std::vector<std::string>> task_rows;
  if (const Json* p = Field(job, "placement"); p != nullptr) {
    const std::string span = DescribeSwitchSpan(*p);
    std::optional<int64_t> nodes = Int(*p, "nodes");
    std::string where = span;
    if (nodes) {
      absl::StrAppend(&where, where.empty() ? "" : ", ", *nodes, " node",
                      *nodes == 1 ? "" : "s");
    }
    if (!where.empty()) add("Placement", where);
    for (const Json& t : Items(*p, "tasks")) {
      task_rows.push_back({Cell(t, "index"), Cell(t, "node"),
                           Cell(t, "address"),
                           Field(t, "gpus") ? FormatIndexList(t["gpus"]) : "-",
                           Cell(t, "state"), Cell(t, "exit_code")});
    }
  }
  if (const Json* spec = Field(job, "spec"); spec != nullptr) {
    if (const Json* r = Field(*spec, "resources"); r != nullptr) {
      if (std::optional<int64_t> procs = Int(*r, "processes_per_task")) {
        add("Processes", absl::StrCat(*procs, " per task"));
      }
    }
    if (const Json* c = Field(*spec, "command"); c != nullptr) {
      add("Command", JoinCommand(*c));
    }
    if (!Str(*spec, "time_limit").empty())
      add("Time limit", Str(*spec, "time_limit"));
  }

  add("Submitted", TimeAndAgo(job, "submit_time", now));
  if (Field(job, "start_time") != nullptr) {
    std::string started = TimeAndAgo(job, "start_time", now);
    if (std::optional<absl::Time> start = TimeField(job, "start_time")) {
      const absl::Time end = TimeField(job, "end_time").value_or(now);
      absl::StrAppend(&started, ", ran ", FormatElapsed(end - *start));
    }
    add("Started", started);
  }
  if (Field(job, "end_time") != nullptr)
    add("Ended", TimeAndAgo(job, "end_time", now));
  if (Field(job, "exit_code") != nullptr || IsFinalJobState(state)) {
    std::string code = Cell(job, "exit_code");
    if (std::optional<int64_t> sig = Int(job, "signal"); sig && *sig > 0) {
      code = absl::StrCat(code == "-" ? "" : code + ", ", "killed by ",
                          SignalName(static_cast<int>(*sig)));
    }
    add("Exit code", code);
  }
  add("Restarts", Cell(job, "restart_count"));
  if (std::optional<int64_t> by = Int(job, "preempted_by")) {
    add("Preempted by", absl::StrCat("job ", *by));
  }
  if (std::optional<int64_t> requeues = Int(job, "requeues");
      requeues && *requeues > 0) {
    add("Requeues", absl::StrCat(*requeues));
  }
  if (const Json* c = Field(job, "checkpoint");
      c != nullptr && c->is_object()) {
    std::string line = TimeAndAgo(*c, "time", now);
    if (std::optional<int64_t> step = Int(*c, "step")) {
      absl::StrAppend(&line, ", step ", *step);
    }
    if (std::optional<int64_t> run = Int(*c, "run")) {
      absl::StrAppend(&line, ", run ", *run);
    }
    add("Checkpoint", line);
  }

  size_t width = 0;
  for (const auto& [label, value] : lines)
    width = std::max(width, label.size());
  std::string out;
  for (const auto& [label, value] : lines) {
    absl::StrAppend(&out, label, ":",
                    std::string(width - label.size() + 2, ' '), value, "\n");
  }
  if (!task_rows.empty()) {
    out += "Tasks:\n";
    for (absl::string_view line : absl::StrSplit(
             FormatTable({"TASK", "NODE", "ADDRESS", "GPUS", "STATE", "EXIT"},
                         task_rows),
             '\n', absl::SkipEmpty())) {
      absl::StrAppend(&out, "  ", line, "\n");
    }
  }
  std::vector<std::vector<std::string>> event_rows;
  for (const Json& e : Items(job, "events")) {
    std::optional<absl::Time> t = TimeField(e, "time");
    std::string message = Cell(e, "message");
    // Repeats the server coalesced into one event (docs/api.md).
    if (std::optional<int64_t> count = Int(e, "count"); count && *count > 1) {
      std::optional<absl::Time> last = TimeField(e, "last_time");
      absl::StrAppend(&message, " (", *count, " times",
                      last ? absl::StrCat(", the last ", FormatAgo(*last, now))
                           : std::string(),
                      ")");
    }
    event_rows.push_back({t ? FormatUtc(*t) : Cell(e, "time"),
                          t ? FormatAgo(*t, now) : "-", message});
  }
  if (!event_rows.empty()) {
    out += "Events:\n";
    for (absl::string_view line :
         absl::StrSplit(FormatTable({"TIME", "AGE", "MESSAGE"}, event_rows),
                        '\n', absl::SkipEmpty())) {
      absl::StrAppend(&out, "  ", line, "\n");
    }
  }
  return out;
}

std::string JsonToYaml(const nlohmann::json& j) {
  YAML::Emitter e;
  EmitYaml(e, j);
  std::string out = e.c_str();
  if (out.empty() || out.back() != '\n') out += '\n';
  return out;
}

// --- Registration and dispatch ---

void AddJobCommands(CLI::App& app, JobCommandFlags* f) {
  CLI::App* submit = AddVerb(app, f, "submit", "Submit a job from a spec file");
  submit
      ->add_option("-f,--file", f->files,
                   "Job spec(s), YAML or JSON (docs/job-spec.md); - reads "
                   "standard input. Several files (-f a.yaml b.yaml, or -f "
                   "repeated) are checked first, then submitted in order")
      ->required();
  submit->add_flag("--hold", f->hold,
                   "Queue the job held: it starts only after `loom release`");
  AddOutputFlag(submit, f, {"json", "yaml"});

  CLI::App* run = AddVerb(app, f, "run",
                          "Run a command on N GPUs: loom run -g 8 -- python "
                          "train.py");
  RunFlags* r = &f->run;
  run->add_option("-g,--gpus", r->gpus,
                  "GPUs in total (a job of up to one node's GPUs is one task; "
                  "more take whole nodes unless --nodes says how many)")
      ->required();
  run->add_option("--nodes", r->nodes,
                  "Spread the GPUs evenly over K nodes (K tasks of N/K GPUs)");
  run->add_option("--procs-per-node", r->procs_per_node,
                  "Processes to start on each node (default: the server's)");
  run->add_option("--project", r->project,
                  "Project to charge (default: default)");
  run->add_option("--gpu-model", r->gpu_model, "GPU model: h200, a100, any");
  run->add_option("--name", r->name,
                  "Job name (default: the command's basename)");
  run->add_option("--time-limit", r->time_limit,
                  "Time limit, e.g. 30m, 12h, 1h30m (lets backfill plan)");
  run->add_option("-e,--env", r->env,
                  "NAME=VALUE set in every task's environment (repeatable)");
  run->add_flag("--hold", r->hold, "Queue the job held until `loom release`");
  run->add_flag("--wait", r->wait,
                "Wait for the job to end and exit with its exit code");
  run->add_option("command", r->command, "The command and its arguments")
      ->required();
  run->positionals_at_end(true);
  AddOutputFlag(run, f, {"json", "yaml"});
  run->footer(
      "Everything after the first word of the command (or after --) is the "
      "command's.\nExit status: 0 ok, 1 the request failed, 2 bad usage; "
      "with --wait the job's exit code, 128+N when signal N killed it, 1 "
      "when it failed without one, 130 on Ctrl-C (the job keeps running).");

  // Job IDs are canonical positive decimals (`ParseJobId`): CLI11 alone
  // reads integers with strtoll base 0 ("010" is 8, "0x10" 16, "-1" -1) and
  // clamps 2^64-1 to 2^63-1, so the wrong job would be asked for.
  const CLI::Validator job_id(
      [](std::string& text) -> std::string {
        absl::StatusOr<int64_t> id = ParseJobId(text);
        return id.ok() ? std::string() : std::string(id.status().message());
      },
      "JOB_ID");
  CLI::App* release = AddVerb(app, f, "release", "Let held jobs start");
  CLI::Option* release_jobs =
      release->add_option("job", f->jobs, "Job IDs")->check(job_id);
  release->add_flag("--all", f->all, "Release all your held jobs")
      ->excludes(release_jobs);

  CLI::App* queue = AddVerb(app, f, "queue", "List jobs (like squeue)");
  CLI::Option* state = queue->add_option(
      "--state", f->state,
      "Only jobs in these states, comma-separated: held, pending, running, "
      "stopping, succeeded, failed, cancelled");
  queue->add_option("--project", f->project, "Only this project's jobs");
  queue->add_option("--user", f->user, "Only this user's jobs");
  queue
      ->add_flag("--all", f->all,
                 "Include finished jobs (default: held, pending, running "
                 "and stopping)")
      ->excludes(state);
  AddOutputFlag(queue, f, {"json", "yaml", "wide"});

  CLI::App* show = AddVerb(app, f, "show",
                           "Show a job: state, placement, why it is "
                           "pending, events");
  show->add_option("job", f->jobs, "Job ID")
      ->required()
      ->expected(1)
      ->check(job_id);
  AddOutputFlag(show, f, {"json", "yaml"});

  CLI::App* logs = AddVerb(app, f, "logs", "Print a job's output");
  logs->add_option("job", f->jobs, "Job ID")
      ->required()
      ->expected(1)
      ->check(job_id);
  logs->add_flag("-f,--follow", f->follow,
                 "Keep printing new output until the task ends");
  logs->add_option("--task", f->task, "Task index (default 0)")
      ->check(CLI::NonNegativeNumber);
  logs->add_option("--process", f->process,
                   "Process of the task, with processes_per_task > 1 "
                   "(default 0, the task's LOCAL_RANK 0)")
      ->check(CLI::NonNegativeNumber);

  logs->add_flag("--stderr", f->stderr_stream,
                 "Standard error instead of output");

  CLI::App* cancel = AddVerb(app, f, "cancel", "Cancel jobs");
  cancel->add_option("job", f->jobs, "Job IDs")->required()->check(job_id);

  CLI::App* checkpoint =
      AddVerb(app, f, "checkpoint",
              "Record that a job saved a checkpoint (run it from the job, "
              "after saving: it uses LOOM_JOB_ID and LOOM_SERVER)");
  checkpoint->add_option("job", f->jobs, "Job ID (default: $LOOM_JOB_ID)")
      ->expected(0, 1)
      ->check(job_id);
  checkpoint->add_option("--step", f->step, "The training step saved")
      ->check(CLI::NonNegativeNumber);

  CLI::App* nodes = AddVerb(app, f, "nodes", "List nodes");
  AddOutputFlag(nodes, f, {"json", "yaml", "wide"});

  for (const auto& [name, text] :
       std::vector<std::pair<std::string, std::string>>{
           {"cordon", "Stop scheduling new work on a node"},
           {"uncordon", "Let a cordoned or drained node take work again"},
           {"drain",
            "Cordon a node; it becomes drained when its jobs have ended"}}) {
    CLI::App* verb = AddVerb(app, f, name, text);
    verb->add_option("node", f->node, "Node name")->required();
  }

  CLI::App* top =
      AddVerb(app, f, "top",
              "The cluster at a glance, refreshed until Ctrl-C: GPUs, nodes by "
              "leaf, waiting jobs and why, the largest running jobs");
  top->add_flag("--once", f->once, "Print once and exit");
  top->add_option("--interval", f->interval, "Refresh period")
      ->capture_default_str();

  CLI::App* chaos = AddVerb(
      app, f, "chaos",
      "Inject a fault (drills and tests): kill-agent NODE, freeze NODE "
      "(drop its heartbeats: a partition), thaw NODE, kill-task JOB "
      "[--task N], fail-gpu NODE GPU (emulated GPUs), heal-gpu NODE GPU, "
      "slow NODE DELAY (agent answers late), heal NODE (lift all)");
  chaos->add_option("action", f->chaos_action, "The fault")->required();
  chaos->add_option("target", f->chaos_target, "A node name, or a job ID")
      ->required();
  chaos->add_option("value", f->chaos_value, "GPU index, or delay");
  chaos->add_option("--task", f->task, "kill-task: the task (default 0)")
      ->check(CLI::NonNegativeNumber);

  CLI::App* projects =
      AddVerb(app, f, "projects", "List projects: quota, weight, usage");
  AddOutputFlag(projects, f, {"json", "yaml"});

  CLI::App* whoami =
      AddVerb(app, f, "whoami", "Show who the API token belongs to");
  AddOutputFlag(whoami, f, {"json", "yaml"});

  CLI::App* token = AddVerb(
      app, f, "token",
      "API tokens (admin): create [--role R --user U --project P... | --join "
      "[--reusable] [--nodes N,...]] [--ttl D], list, revoke ID | revoke "
      "--node NAME");
  token->add_option("action", f->token_action, "create, list or revoke")
      ->required()
      ->check(CLI::IsMember({"create", "list", "revoke"}));
  token->add_option("id", f->token_id, "revoke: the token's ID");
  token->add_option("--role", f->token_role, "create: admin, operator, user")
      ->capture_default_str();
  token->add_option("--user", f->token_user, "create: the user's name");
  token->add_option("--project", f->token_projects,
                    "create: a project the user may submit to (repeat; * for "
                    "all)");
  token->add_option("--ttl", f->token_ttl,
                    "create: lifetime (1h, 7d, ...); default none");
  token->add_flag("--join", f->token_join,
                  "create: a bootstrap token for agents to join with");
  token->add_flag("--once", f->token_once,
                  "create --join: redeemable by one node only (the default; "
                  "kept for older scripts)");
  token->add_flag("--reusable", f->token_reusable,
                  "create --join: any number of nodes may join with it "
                  "(each only while it has no live credential)");
  token
      ->add_option("--nodes", f->token_nodes,
                   "create --join: only these nodes may join with it, each "
                   "once (comma-separated)")
      ->delimiter(',');
  token->add_option("--description", f->token_description,
                    "create: a note shown by `token list`");
  token->add_option("--node", f->token_node,
                    "revoke: the node whose credential to revoke");
  AddOutputFlag(token, f, {"json", "yaml"});

  for (const auto& [name, verb] : f->verbs) {
    if (name != "run") verb->footer(kExitFooter);
  }
}

int RunJobCommand(std::string_view verb, const JobCommandFlags& flags,
                  const CommandContext& context) {
  const Verb v{std::string(verb), flags, context};
  if (verb == "submit") return Submit(v);
  if (verb == "run") return Run(v);
  if (verb == "release") return Release(v);
  if (verb == "queue") return Queue(v);
  if (verb == "show") return Show(v);
  if (verb == "logs") return Logs(v);
  if (verb == "cancel") return Cancel(v);
  if (verb == "checkpoint") return Checkpoint(v);
  if (verb == "nodes") return Nodes(v);
  if (verb == "cordon" || verb == "uncordon" || verb == "drain") {
    return NodeAction(v);
  }
  if (verb == "projects") return Projects(v);
  if (verb == "whoami") return WhoAmI(v);
  if (verb == "token") return Token(v);
  if (verb == "chaos") return Chaos(v);
  if (verb == "top") return Top(v);
  return v.Fail(kExitUsage, "unknown verb");
}

std::optional<int> RunJobCommands(const JobCommandFlags& flags) {
  for (const auto& [name, app] : flags.verbs) {
    if (!app->parsed()) continue;
    CommandContext context;
    context.out = &std::cout;
    context.err = &std::cerr;
    if ((name == "run" && flags.run.wait) || name == "top") {
      // The first Ctrl-C ends the wait (exit 130); a second one kills.
      struct sigaction sa {};
      sa.sa_handler = OnInterrupt;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESETHAND;
      sigaction(SIGINT, &sa, nullptr);
      context.interrupted = &g_interrupted;
    }
    std::signal(SIGPIPE, SIG_IGN);  // `loom logs -f | head` ends cleanly
    return RunJobCommand(name, flags, context);
  }
  return std::nullopt;
}

}  // namespace loom
