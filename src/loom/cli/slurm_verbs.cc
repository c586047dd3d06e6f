#include "loom/cli/slurm_verbs.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/cli/verb.h"
#include "loom/cli/verb_flags.h"
#include "loom/client/api_client.h"
#include "loom/common/hostlist.h"
#include "loom/core/job_spec.h"
#include "loom/core/sbatch_job.h"
#include "loom/core/sbatch_script.h"

namespace loom::cli {
namespace {

// `scontrol show hostnames [LIST]`: one name per line, LIST defaulting to
// $SLURM_JOB_NODELIST; `scontrol show hostlist NAMES`: the compressed form.
int Scontrol(const Verb& v) {
  const std::vector<std::string>& words = v.flags.scontrol_words;
  if (words.size() < 2 || words[0] != "show" ||
      (words[1] != "hostnames" && words[1] != "hostlist") || words.size() > 3) {
    return v.Fail(kExitUsage,
                  "loom scontrol does only what batch scripts use: `show "
                  "hostnames [LIST]` and `show hostlist NAME,NAME...`");
  }
  std::string list;
  if (words.size() == 3) {
    list = words[2];
  } else if (std::optional<std::string> env =
                 v.ctx.getenv("SLURM_JOB_NODELIST");
             env.has_value() && words[1] == "hostnames") {
    list = *env;
  } else {
    return v.Fail(kExitUsage,
                  absl::StrCat("show ", words[1],
                               ": give a host list (or run it in a batch "
                               "job, where SLURM_JOB_NODELIST is set)"));
  }
  absl::StatusOr<std::vector<std::string>> hosts = ExpandHostlist(list);
  if (!hosts.ok()) return v.Fail(kExitUsage, hosts.status());
  if (words[1] == "hostlist") {
    v.out() << CompressHostlist(*hosts) << "\n";
  } else {
    for (const std::string& h : *hosts) v.out() << h << "\n";
  }
  return kExitOk;
}

// The GPUs of a whole node, for --exclusive: the most any node of the
// partition (pool) has, or of the cluster without -p; 0 when none answer.
int NodeGpus(ApiClient& client, const std::optional<std::string>& pool) {
  absl::StatusOr<nlohmann::json> nodes = client.ListNodes();
  if (!nodes.ok()) return 0;
  const nlohmann::json* list = &*nodes;
  if (list->is_object() && list->contains("nodes")) list = &(*list)["nodes"];
  if (!list->is_array()) return 0;
  int gpus = 0;
  for (const nlohmann::json& n : *list) {
    if (!n.is_object()) continue;
    if (pool && n.value("pool", std::string()) != *pool) continue;
    const nlohmann::json g = n.value("gpus", nlohmann::json(0));
    if (g.is_number_integer()) gpus = std::max(gpus, g.get<int>());
  }
  return gpus;
}

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// `loom sbatch [OPTIONS] SCRIPT [ARGS...]` (docs/sbatch.md).
int Sbatch(const Verb& v, const std::vector<std::string>& args) {
  absl::StatusOr<SbatchCommandLine> cl = ParseSbatchArgs(args);
  if (!cl.ok()) return v.Fail(kExitUsage, cl.status());
  SbatchContext ctx;
  if (cl->script_and_args.empty()) {
    // As sbatch: no script file, the script comes on stdin.
    if (::isatty(STDIN_FILENO)) {
      return v.Fail(kExitUsage, "give the batch script (a file, or on stdin)");
    }
    ctx.script.assign(std::istreambuf_iterator<char>(std::cin),
                      std::istreambuf_iterator<char>());
    ctx.script_name = "sbatch";
  } else {
    ctx.script_name = cl->script_and_args[0];
    std::ifstream in(ctx.script_name, std::ios::binary);
    if (!in) {
      return v.Fail(kExitUsage,
                    absl::StrCat(ctx.script_name, ": cannot be read"));
    }
    std::ostringstream text;
    text << in.rdbuf();
    ctx.script = text.str();
    ctx.args.assign(cl->script_and_args.begin() + 1, cl->script_and_args.end());
  }
  absl::StatusOr<SbatchScript> script = ParseSbatchScript(ctx.script);
  if (!script.ok()) {
    return v.Fail(kExitUsage, absl::StrCat(ctx.script_name, ": ",
                                           script.status().message()));
  }
  const SbatchOptions options = Merge(script->options, cl->options);
  ctx.submit_dir = v.ctx.working_dir();
  ctx.submit_host = HostName();
  ctx.user = CurrentUser(v.ctx.getenv);
  ctx.environment = v.ctx.environment();
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  if (options.exclusive.value_or(false)) {
    ctx.node_gpus = NodeGpus(*client, options.partition);
  }
  absl::StatusOr<SbatchJob> job = BuildSbatchJob(options, ctx);
  if (!job.ok()) return v.Fail(kExitUsage, job.status());
  for (const std::vector<std::string>* warnings :
       {&script->warnings, &cl->warnings, &job->warnings}) {
    for (const std::string& w : *warnings) {
      v.err() << "loom sbatch: warning: " << w << "\n";
    }
  }
  absl::StatusOr<nlohmann::json> submitted = client->SubmitJob(
      nlohmann::json::parse(JobSpecToJson(job->spec), nullptr, false));
  if (!submitted.ok()) return v.Fail(kExitFailed, submitted.status());
  const int64_t id = submitted->value("id", int64_t{0});
  if (options.parsable.value_or(false)) {
    v.out() << id << "\n";
  } else {
    v.out() << "Submitted batch job " << id << "\n";
  }
  return kExitOk;
}

}  // namespace

void AddSlurmVerbs(CLI::App& app, JobCommandFlags* f) {
  CLI::App* scontrol = app.add_subcommand(
      "scontrol",
      "Slurm's scontrol, the part batch scripts use: `show hostnames "
      "[LIST]` expands a host list (default $SLURM_JOB_NODELIST), one per "
      "line; `show hostlist A,B` compresses one");
  scontrol->add_option("words", f->scontrol_words, "show hostnames [LIST]")
      ->required();
  f->verbs.emplace_back("scontrol", scontrol);

  CLI::App* sbatch = AddVerb(
      app, f, "sbatch",
      "Submit a Slurm batch script: `loom sbatch [OPTIONS] SCRIPT [ARGS]`, "
      "with its #SBATCH directives and sbatch's options (docs/sbatch.md); "
      "loom's --server and --token-file go before sbatch's options");
  // Everything from sbatch's first option on is sbatch's, as written.
  sbatch->prefix_command();
}

std::optional<int> RunSlurmVerb(const Verb& v) {
  if (v.name == "scontrol") return Scontrol(v);
  if (v.name == "sbatch") {
    for (const auto& [name, app] : v.flags.verbs) {
      if (name == "sbatch") return Sbatch(v, app->remaining());
    }
  }
  return std::nullopt;
}

}  // namespace loom::cli
