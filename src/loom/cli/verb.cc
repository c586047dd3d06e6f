#include "loom/cli/verb.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "loom/cli/output_format.h"

namespace loom::cli {

int Verb::Fail(int code, absl::string_view message) const {
  err() << "loom " << name << ": " << message << "\n";
  return code;
}

int Verb::Fail(int code, const absl::Status& status) const {
  return Fail(code, status.message());
}

int Verb::FailJob(int64_t id, const absl::Status& status) const {
  const std::string m(status.message());
  if (absl::StrContains(m, absl::StrCat("job ", id))) {
    return Fail(kExitFailed, m);
  }
  return Fail(kExitFailed, absl::StrCat("job ", id, ": ", m));
}

bool Verb::PrintStructured(const nlohmann::json& j) const {
  return cli::PrintStructured(flags.output, j, out());
}

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

int RequestAndPrint(
    const Verb& v,
    const std::function<absl::StatusOr<nlohmann::json>(ApiClient&)>& request,
    const std::function<std::string(const nlohmann::json&)>& format) {
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  absl::StatusOr<nlohmann::json> reply = request(*client);
  if (!reply.ok()) return v.Fail(kExitFailed, reply.status());
  if (!v.PrintStructured(*reply)) v.out() << format(*reply);
  return kExitOk;
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

}  // namespace loom::cli
