#include "loom/cli/verb_flags.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/common/job_id.h"
#include "loom/core/job_array.h"

namespace loom::cli {

void AddServerFlags(CLI::App* verb, JobCommandFlags* f) {
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
  AddServerFlags(verb, f);
  return verb;
}

CLI::Validator JobIdValidator() {
  // CLI11 alone reads integers with strtoll base 0 ("010" is 8, "0x10" 16,
  // "-1" -1) and clamps 2^64-1 to 2^63-1, so the wrong job would be asked
  // for.
  return CLI::Validator(
      [](std::string& text) -> std::string {
        absl::StatusOr<int64_t> id = ParseJobId(text);
        return id.ok() ? std::string() : std::string(id.status().message());
      },
      "JOB_ID");
}

CLI::Validator JobRefValidator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text.find('_') != std::string::npos) {
          absl::StatusOr<ArrayElementRef> ref = ParseArrayElementRef(text);
          return ref.ok() ? std::string() : std::string(ref.status().message());
        }
        absl::StatusOr<int64_t> id = ParseJobId(text);
        return id.ok() ? std::string() : std::string(id.status().message());
      },
      "JOB_ID");
}

}  // namespace loom::cli
