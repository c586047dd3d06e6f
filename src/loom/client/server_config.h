#pragma once

// Where the CLI finds the loom server: `--server URL[,URL]`, else the
// environment variable `LOOM_SERVER`, else the config file (`$LOOM_CONFIG`
// or `~/.config/loom/config.yaml`) with `server: URL`. See docs/cli.md.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace loom {

// Reads an environment variable; nullopt when it is not set. Injected so
// that tests need not touch the process environment.
using GetEnvFn = std::function<std::optional<std::string>(const char* name)>;

// `std::getenv`.
std::optional<std::string> GetProcessEnv(const char* name);

struct ServerList {
  std::vector<std::string> urls;  // normalised (`NormalizeServerUrl`)
  std::string source;             // "--server", "LOOM_SERVER" or a file path
};

// Splits "URL[,URL...]" and normalises each; empty items are skipped.
// InvalidArgument names `source` and the bad URL; an empty list is an error.
absl::StatusOr<std::vector<std::string>> ParseServerUrls(
    std::string_view text, std::string_view source);

// Reads `server:` from a config file's text: a URL, comma-separated URLs or
// a YAML list of URLs. Other keys are ignored (they belong to other
// settings). Returns an empty list when the file has no `server:`, and
// InvalidArgument for YAML errors and bad URLs ("<path>:<line>:<col>: ...").
absl::StatusOr<std::vector<std::string>> ParseConfigServers(
    std::string_view text, std::string_view path);

// Finds the servers, in order: `flag` when not empty, `LOOM_SERVER` when set
// and not empty, then the config file: `$LOOM_CONFIG` when set (then it must
// exist), else `$HOME/.config/loom/config.yaml` when it exists. When none
// names a server, returns InvalidArgument telling the user the three ways.
absl::StatusOr<ServerList> DiscoverServers(std::string_view flag,
                                           const GetEnvFn& getenv);

// Finds the API token, in order: the file `flag` (`--token-file`) when not
// empty, `LOOM_TOKEN` (the token itself), the file `LOOM_TOKEN_FILE`, the
// file named by `token_file:` in the config file, then
// `$HOME/.config/loom/token` when it exists. Returns "" when none is
// configured (the server then answers 401 with how to get one), and
// InvalidArgument naming a file that cannot be read or is empty. The token
// is never part of an error message.
absl::StatusOr<std::string> DiscoverToken(std::string_view flag,
                                          const GetEnvFn& getenv);

}  // namespace loom
