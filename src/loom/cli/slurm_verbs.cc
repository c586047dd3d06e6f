#include "loom/cli/slurm_verbs.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/common/hostlist.h"

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
}

std::optional<int> RunSlurmVerb(const Verb& v) {
  if (v.name == "scontrol") return Scontrol(v);
  return std::nullopt;
}

}  // namespace loom::cli
