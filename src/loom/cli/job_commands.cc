#include "loom/cli/job_commands.h"

#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <iostream>
#include <memory>

#include "loom/cli/accounting_verbs.h"
#include "loom/cli/cluster_verbs.h"
#include "loom/cli/dataset_verbs.h"
#include "loom/cli/image_verbs.h"
#include "loom/cli/job_verbs.h"
#include "loom/cli/job_wait.h"
#include "loom/cli/maintain_verbs.h"
#include "loom/cli/node_verbs.h"
#include "loom/cli/service_verbs.h"
#include "loom/cli/slurm_verbs.h"
#include "loom/cli/spec_verbs.h"
#include "loom/cli/token_verbs.h"
#include "loom/cli/verb.h"
#include "loom/client/api_client.h"
#include "loom/common/job_id.h"

namespace loom {
namespace {

std::atomic<bool> g_interrupted{false};

void OnInterrupt(int) { g_interrupted.store(true); }

}  // namespace

std::vector<std::pair<std::string, std::string>> ProcessEnvironment() {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    env.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

std::string ProcessWorkingDir() {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::current_path(ec);
  return ec ? std::string("/") : p.string();
}

// --- Registration and dispatch ---

void AddJobCommands(CLI::App& app, JobCommandFlags* f) {
  // The options every client verb has, also before the verb (as kubectl's
  // `kubectl -o json get pods`): `loom --server URL queue`. After the verb
  // they win.
  app.add_option("--server", f->server,
                 "Server URL(s) of the client verbs (also after the verb)");
  app.add_option("--token-file", f->token_file,
                 "API token file of the client verbs (also after the verb)");
  app.add_option("-o,--output", f->output,
                 "Output format of the client verbs: json|yaml (also after "
                 "the verb)")
      ->check(CLI::IsMember({"json", "yaml"}));
  cli::AddJobVerbs(app, f);
  cli::AddAttachVerb(app, f);
  cli::AddNodeVerbs(app, f);
  cli::AddClusterVerbs(app, f);
  cli::AddTokenVerbs(app, f);
  cli::AddImageVerbs(app, f);
  cli::AddDatasetVerbs(app, f);
  cli::AddSpecVerbs(app, f);
  cli::AddMaintainVerbs(app, f);
  cli::AddSlurmVerbs(app, f);
  cli::AddAccountingVerbs(app, f);
  cli::AddServiceVerbs(app, f);
  for (const auto& [name, verb] : f->verbs) {
    // `run`, `attach` and `maintain` say what their waits exit with.
    if (name != "run" && name != "attach" && name != "maintain") {
      verb->footer(cli::kExitFooter);
    }
  }
}

int RunJobCommand(std::string_view verb, const JobCommandFlags& given,
                  const CommandContext& context) {
  // Job references ("12", "12_7") become job IDs; sacct passes them on as
  // they are (the server knows the elements of purged arrays too).
  JobCommandFlags flags = given;
  if (!given.job_refs.empty() && verb != "sacct") {
    const cli::Verb first{std::string(verb), given, context};
    std::unique_ptr<ApiClient> client;
    for (const std::string& ref : given.job_refs) {
      if (ref.find('_') == std::string::npos) {
        absl::StatusOr<int64_t> id = ParseJobId(ref);
        if (!id.ok()) return first.Fail(cli::kExitUsage, id.status());
        flags.jobs.push_back(*id);
        continue;
      }
      if (client == nullptr) client = cli::MakeClient(first);
      if (client == nullptr) return cli::kExitUsage;
      absl::StatusOr<nlohmann::json> job = client->GetJobRef(ref);
      if (!job.ok()) return first.Fail(cli::kExitFailed, job.status());
      flags.jobs.push_back(job->value("id", int64_t{0}));
    }
  }
  const cli::Verb v{std::string(verb), flags, context};
  // `-o` given before a verb that has none.
  for (const auto& [name, app] : flags.verbs) {
    if (name == verb && !flags.output.empty() &&
        app->get_option_no_throw("-o") == nullptr) {
      return v.Fail(cli::kExitUsage,
                    "-o: this verb prints no structured output");
    }
  }
  for (auto run :
       {cli::RunJobVerb, cli::RunAttachVerb, cli::RunNodeVerb,
        cli::RunClusterVerb, cli::RunTokenVerb, cli::RunImageVerb,
        cli::RunDatasetVerb, cli::RunSpecVerb, cli::RunMaintainVerb,
        cli::RunSlurmVerb, cli::RunAccountingVerb, cli::RunServiceVerb}) {
    if (std::optional<int> rc = run(v)) return *rc;
  }
  return v.Fail(cli::kExitUsage, "unknown verb");
}

std::optional<int> RunJobCommands(const JobCommandFlags& flags) {
  for (const auto& [name, app] : flags.verbs) {
    if (!app->parsed()) continue;

    CommandContext context;
    context.out = &std::cout;
    context.err = &std::cerr;
    if ((name == "run" && flags.run.wait) || name == "top" ||
        name == "attach" ||
        (name == "maintain" && (flags.maintain.wait || flags.maintain.watch))) {
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
