#include "loom/cli/job_wait.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/cli/job_output.h"
#include "loom/cli/reply_fields.h"
#include "loom/cli/run_spec.h"
#include "loom/cli/verb_flags.h"

namespace loom::cli {
namespace {

using Json = nlohmann::json;

// How long the output streams have, once the job has ended, to deliver
// what its tasks wrote last.
constexpr absl::Duration kDrainOutput = absl::Seconds(10);

int Attach(const Verb& v) {
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  return FollowJob(v, *client, v.flags.jobs.at(0),
                   /*cancel_on_interrupt=*/false);
}

}  // namespace

std::string StateLine(const Json& job) {
  const int64_t id = Int(job, "id").value_or(0);
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

int FollowJob(const Verb& v, ApiClient& client, int64_t id,
              bool cancel_on_interrupt) {
  const char* verb = cancel_on_interrupt ? "loom run" : "loom attach";
  JobOutputFollower output([&v] { return MakeClient(v); }, id, v.flags.label,
                           v.out(), v.err());
  std::string last_line;
  bool warned = false;
  bool cancelled = false;
  while (true) {
    if (v.ctx.interrupted != nullptr && v.ctx.interrupted->load() &&
        !cancelled) {
      if (!cancel_on_interrupt) break;
      cancelled = true;
      absl::StatusOr<Json> c = client.CancelJob(id);
      v.err() << verb << ": "
              << (c.ok() ? absl::StrCat("cancelling job ", id)
                         : absl::StrCat("cannot cancel job ", id, ": ",
                                        c.status().message()))
              << " (Ctrl-C again to leave at once)\n";
    }
    absl::StatusOr<Json> job = client.GetJob(id);
    if (!job.ok()) {
      if (job.status().code() != absl::StatusCode::kUnavailable) {
        return v.FailJob(id, job.status());
      }
      if (!warned) {
        v.err() << verb << ": " << job.status().message()
                << "; still waiting for job " << id << "\n";
        warned = true;
      }
    } else {
      warned = false;
      output.Follow(*job);
      const std::string state = Str(*job, "state");
      if (IsFinalJobState(state)) {
        if (!output.Finish(kDrainOutput)) {
          v.err() << verb << ": some output of job " << id
                  << " did not arrive (see `loom logs " << id << "`)\n";
        }
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
    if (cancelled) {
      std::this_thread::sleep_for(
          absl::ToChronoMilliseconds(v.ctx.poll_interval));
    } else if (!SleepUnlessInterrupted(v.ctx) && !cancel_on_interrupt) {
      break;
    }
  }
  output.Finish(absl::ZeroDuration());
  v.err() << verb << ": detached; job " << id << " keeps running (`loom attach "
          << id << "` follows it again, "
          << "`loom cancel " << id << "` stops it)\n";
  return kExitInterrupted;
}

void AddAttachVerb(CLI::App& app, JobCommandFlags* f) {
  CLI::App* attach =
      AddVerb(app, f, "attach",
              "Follow a job: its state, and every task's output live, until "
              "it ends (like sattach)");
  attach->add_option("job", f->job_refs, "Job ID (or an array element, 12_7)")
      ->required()
      ->expected(1)
      ->check(JobRefValidator());
  attach->add_flag("-l,--label", f->label,
                   "Lead each output line with its rank, as `srun -l`");
  AddOutputFlag(attach, f, {"json", "yaml"});
  attach->footer(
      "Exit status: the job's exit code (128+N when signal N killed it, 1 "
      "when it failed without one), 1 when the request failed, 130 on "
      "Ctrl-C (the job keeps running).");
}

std::optional<int> RunAttachVerb(const Verb& v) {
  if (v.name == "attach") return Attach(v);
  return std::nullopt;
}

}  // namespace loom::cli
