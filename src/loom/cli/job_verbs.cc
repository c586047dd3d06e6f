#include "loom/cli/job_verbs.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "loom/cli/job_format.h"
#include "loom/cli/job_wait.h"
#include "loom/cli/reply_fields.h"
#include "loom/cli/run_spec.h"
#include "loom/cli/verb_flags.h"
#include "loom/client/api_client.h"
#include "loom/common/job_id.h"
#include "loom/core/job_spec.h"

namespace loom::cli {
namespace {

const char* const kJobStates[] = {"held",     "pending",   "running",
                                  "stopping", "succeeded", "failed",
                                  "cancelled"};

int64_t JobId(const Json& job) { return Int(job, "id").value_or(0); }

void PrintSubmitted(const Verb& v, const Json& job) {
  const int64_t id = JobId(job);
  v.out() << "submitted job " << id;
  if (const Json* a = Field(job, "array"); a != nullptr && a->is_object()) {
    v.out() << " (an array of " << Cell(*a, "elements") << " elements, " << id
            << "_[" << Str(*a, "indices") << "])";
  }
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
    if (absl::Status st = ApplyDependencyFlags(
            v.flags.dependency, v.flags.kill_on_invalid_dep, &*spec);
        !st.ok()) {
      return v.Fail(kExitUsage, st);
    }
    if (absl::Status st = ApplyArrayFlag(v.flags.array, &*spec); !st.ok()) {
      return v.Fail(kExitUsage, st);
    }
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
      rc = v.Fail(kExitFailed,
                  bodies.size() == 1
                      ? std::string(job.status().message())
                      : absl::StrCat(v.flags.files[i], ": ",
                                     std::string(job.status().message())));
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

int Run(const Verb& v) {
  if (v.flags.run.wait && !v.flags.run.array.empty()) {
    return v.Fail(kExitUsage,
                  "--wait follows one job; an array's elements are jobs of "
                  "their own (follow one with `loom attach 12_7`)");
  }
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
  return FollowJob(v, *client, JobId(*job), /*cancel_on_interrupt=*/true);
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
  return RequestAndPrint(
      v, [&](ApiClient& client) { return client.ListJobs(filter); },
      [&](const Json& jobs) {
        return FormatJobTable(jobs, v.flags.output == "wide", v.ctx.now());
      });
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

int Logs(const Verb& v) { return PrintJobLogs(v, v.flags.jobs.at(0)); }

int Hold(const Verb& v) {
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  int rc = kExitOk;
  for (int64_t id : v.flags.jobs) {
    absl::StatusOr<Json> job = client->HoldJob(id);
    if (!job.ok()) {
      rc = v.FailJob(id, job.status());
      continue;
    }
    const std::string name = Str(*job, "display_id");
    v.out() << "job " << (name.empty() ? std::to_string(id) : name)
            << " held (`loom release` queues it again)\n";
  }
  return rc;
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
}  // namespace

int PrintJobLogs(const Verb& v, int64_t id) {
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  LogRequest request;
  request.task = v.flags.task;
  request.run = v.flags.log_run;
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

constexpr const char* kDependencyHelp =
    "Start only once other jobs allow it, as Slurm's --dependency: "
    "afterok:ID[:ID...], afterany:, afternotok:, after:, singleton; joined "
    "by ',' (all) or '?' (any)";
constexpr const char* kArrayHelp =
    "An array of jobs, one per index, as Slurm's --array: 0-999, 1,3,5-9:2, "
    "with %M to run at most M at once (0-999%10); each sees "
    "LOOM_ARRAY_JOB_ID and LOOM_ARRAY_TASK_ID";
constexpr const char* kKillOnInvalidDepHelp =
    "Cancel the job if its dependency can never be met (else it stays "
    "pending)";

void AddJobVerbs(CLI::App& app, JobCommandFlags* f) {
  CLI::App* submit = AddVerb(app, f, "submit", "Submit a job from a spec file");
  submit
      ->add_option("-f,--file", f->files,
                   "Job spec(s), YAML or JSON (docs/job-spec.md); - reads "
                   "standard input. Several files (-f a.yaml b.yaml, or -f "
                   "repeated) are checked first, then submitted in order")
      ->required();
  submit->add_flag("--hold", f->hold,
                   "Queue the job held: it starts only after `loom release`");
  submit->add_option("-d,--dependency", f->dependency, kDependencyHelp);
  submit->add_flag("--kill-on-invalid-dep", f->kill_on_invalid_dep,
                   kKillOnInvalidDepHelp);
  submit->add_option("-a,--array", f->array, kArrayHelp);
  AddOutputFlag(submit, f, {"json", "yaml"});

  CLI::App* run = AddVerb(app, f, "run",
                          "Run a command on N GPUs: loom run -g 8 -- python "
                          "train.py");
  RunFlags* r = &f->run;
  run->add_option("-g,--gpus", r->gpus,
                  "GPUs in total (a job of up to one node's GPUs is one task; "
                  "more take whole nodes unless --nodes says how many); with "
                  "--mig or --gpu-memory, the number of tasks (default 1)");
  run->add_option_function<std::string>(
      "--mig", [r](const std::string& v) { r->mig = v; },
      "Run each task on a MIG instance of this profile, e.g. "
      "1g.18gb (H200), 1g.10gb (A100 80GB)");
  run->add_option_function<std::string>(
      "--gpu-memory", [r](const std::string& v) { r->gpu_memory = v; },
      "Run each task on a time-shared GPU with this much of its "
      "memory, e.g. 20Gi, at least 1Gi (no isolation: docs/job-spec.md)");
  run->add_option("--nodes", r->nodes,
                  "Spread the GPUs evenly over K nodes (K tasks of N/K GPUs)");
  run->add_option("--procs-per-node", r->procs_per_node,
                  "Processes to start on each node (default: the server's)");
  run->add_option("--project", r->project,
                  "Project to charge (default: default)");
  run->add_option("--gpu-model", r->gpu_model, "GPU model: h200, a100, any");
  run->add_option("--name", r->name,
                  "Job name (default: the command's basename)");
  run->add_option("--constraint", r->constraints,
                  "KEY=VALUE: run only on nodes with this label (KEY alone: "
                  "with any value); repeatable, all must match, e.g. "
                  "--constraint gpu.driver=550.54.15");
  run->add_option("--time-limit", r->time_limit,
                  "Time limit, e.g. 30m, 12h, 1h30m (lets backfill plan)");
  run->add_option("-e,--env", r->env,
                  "NAME=VALUE set in every task's environment (repeatable)");
  run->add_option("--image", r->image,
                  "Run every task in this container image, e.g. "
                  "registry.example.com:5000/team/train:1.4 (the server "
                  "pins it to its digest at submit)");
  run->add_option("--mount", r->mounts,
                  "SRC:DST[:ro] host directory to bind into the image "
                  "(repeatable; the cluster spec says which are allowed)");
  run->add_option("--container-workdir", r->container_workdir,
                  "Working directory inside the image (default: the "
                  "image's)");
  run->add_flag("--writable", r->writable,
                "A writable layer over the image's read-only root");
  run->add_option("--shm-size", r->shm_size,
                  "Size of /dev/shm, e.g. 16Gi (default: the task's memory "
                  "when set, else half the node's)");
  run->add_flag("--hold", r->hold, "Queue the job held until `loom release`");
  run->add_option("-d,--dependency", r->dependency, kDependencyHelp);
  run->add_flag("--kill-on-invalid-dep", r->kill_on_invalid_dep,
                kKillOnInvalidDepHelp);
  run->add_option("-a,--array", r->array, kArrayHelp);
  run->add_flag("--wait", r->wait,
                "Wait for the job to end, streaming every task's output, and "
                "exit with its exit code (as srun)");
  run->add_flag("-l,--label", f->label,
                "With --wait: lead each output line with its rank, as "
                "`srun -l`");
  run->add_option("command", r->command, "The command and its arguments")
      ->required();
  run->positionals_at_end(true);
  AddOutputFlag(run, f, {"json", "yaml"});
  run->footer(
      "Everything after the first word of the command (or after --) is the "
      "command's.\nExit status: 0 ok, 1 the request failed, 2 bad usage; "
      "with --wait the job's exit code, 128+N when signal N killed it, 1 "
      "when it failed without one. With --wait, Ctrl-C cancels the job and "
      "waits for its end (as srun); a second Ctrl-C leaves at once.");

  const CLI::Validator job_id = JobIdValidator();
  const CLI::Validator job_ref = JobRefValidator();
  CLI::App* release = AddVerb(app, f, "release", "Let held jobs start");
  CLI::Option* release_jobs =
      release
          ->add_option("job", f->job_refs, "Job IDs (or array elements, 12_7)")
          ->check(job_ref);
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
  show->add_option("job", f->job_refs, "Job ID (or an array element, 12_7)")
      ->required()
      ->expected(1)
      ->check(job_ref);
  AddOutputFlag(show, f, {"json", "yaml"});

  CLI::App* logs = AddVerb(app, f, "logs", "Print a job's output");
  logs->add_option("job", f->job_refs, "Job ID (or an array element, 12_7)")
      ->required()
      ->expected(1)
      ->check(job_ref);
  logs->add_flag("-f,--follow", f->follow,
                 "Keep printing new output until the task ends");
  logs->add_option("--task", f->task, "Task index (default 0)")
      ->check(CLI::NonNegativeNumber);
  logs->add_option("--process", f->process,
                   "Process of the task, with processes_per_task > 1 "
                   "(default 0, the task's LOCAL_RANK 0)")
      ->check(CLI::NonNegativeNumber);
  logs->add_option("--run", f->log_run,
                   "An earlier run of a restarted or requeued job (its "
                   "LOOM_RESTART_COUNT; the last 5 are kept). Default: the "
                   "current run, or while the job waits to run again, the "
                   "last one")
      ->check(CLI::NonNegativeNumber);

  logs->add_flag("--stderr", f->stderr_stream,
                 "Standard error instead of output");

  CLI::App* cancel = AddVerb(app, f, "cancel", "Cancel jobs");
  cancel
      ->add_option("job", f->job_refs,
                   "Job IDs (an array: all its elements; or one element, 12_7)")
      ->required()
      ->check(job_ref);

  CLI::App* hold = AddVerb(app, f, "hold",
                           "Hold pending jobs (an array, or one element, 12_7) "
                           "until `loom release`, as `scontrol hold`");
  hold->add_option("job", f->job_refs, "Job IDs")->required()->check(job_ref);

  CLI::App* checkpoint =
      AddVerb(app, f, "checkpoint",
              "Record that a job saved a checkpoint (run it from the job, "
              "after saving: it uses LOOM_JOB_ID and LOOM_SERVER)");
  checkpoint->add_option("job", f->jobs, "Job ID (default: $LOOM_JOB_ID)")
      ->expected(0, 1)
      ->check(job_id);
  checkpoint->add_option("--step", f->step, "The training step saved")
      ->check(CLI::NonNegativeNumber);
}

std::optional<int> RunJobVerb(const Verb& v) {
  if (v.name == "submit") return Submit(v);
  if (v.name == "run") return Run(v);
  if (v.name == "release") return Release(v);
  if (v.name == "queue") return Queue(v);
  if (v.name == "show") return Show(v);
  if (v.name == "logs") return Logs(v);
  if (v.name == "cancel") return Cancel(v);
  if (v.name == "hold") return Hold(v);
  if (v.name == "checkpoint") return Checkpoint(v);
  return std::nullopt;
}

}  // namespace loom::cli
