#pragma once

// What every client verb shares while it runs: its name, flags and
// surroundings, how it reports a failure (the message on stderr and the exit
// code, job_commands.h), and how it reaches the server. A non-2xx reply or a
// network failure comes back from `ApiClient` as a Status whose message is
// the server's (docs/api.md); a verb prints it as "loom VERB: MESSAGE" and
// exits 1.

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "loom/cli/job_commands.h"
#include "loom/client/api_client.h"
#include "loom/client/server_config.h"
#include "nlohmann/json.hpp"

namespace loom::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInterrupted = 130;

// The footer of a verb's --help that says what it exits with.
inline constexpr char kExitFooter[] =
    "Exit status: 0 ok, 1 the request failed at the server or on the "
    "network, 2 bad usage or input. See docs/cli.md.";

// One run of a verb. `flags` and `ctx` outlive it.
struct Verb {
  std::string name;
  const JobCommandFlags& flags;
  const CommandContext& ctx;

  std::ostream& out() const { return *ctx.out; }
  std::ostream& err() const { return *ctx.err; }

  // Prints "loom NAME: MESSAGE" on stderr; returns `code`.
  int Fail(int code, absl::string_view message) const;
  int Fail(int code, const absl::Status& status) const;
  // A failed request about job `id`: names the job unless the server's
  // message already does. Returns kExitFailed.
  int FailJob(int64_t id, const absl::Status& status) const;

  // Prints `j` as -o asks (json or yaml); returns false for table output.
  bool PrintStructured(const nlohmann::json& j) const;
};

// The user the requests are made as: $USER, else the name of the process's
// user, else "".
std::string CurrentUser(const GetEnvFn& getenv);

// Finds the servers and the token and makes a client; prints the error and
// returns null when no server is configured or the token cannot be read
// (the verb then exits kExitUsage).
std::unique_ptr<ApiClient> MakeClient(const Verb& v);

// One request whose reply a verb prints, start to end: makes the client
// (kExitUsage when there is none), sends `request` (kExitFailed, with its
// message, when it fails), then prints the reply as -o asks, or else as
// `format` writes it (kExitOk).
int RequestAndPrint(
    const Verb& v,
    const std::function<absl::StatusOr<nlohmann::json>(ApiClient&)>& request,
    const std::function<std::string(const nlohmann::json&)>& format);

// Sleeps `ctx.poll_interval` in slices so that Ctrl-C is noticed quickly;
// false when interrupted.
bool SleepUnlessInterrupted(const CommandContext& ctx);

}  // namespace loom::cli
