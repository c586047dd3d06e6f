// `loom`: one binary, many verbs.

#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "loom/agent/agent_command.h"
#include "loom/batch/batch_runtime.h"
#include "loom/cli/dev_command.h"
#include "loom/cli/gateway_command.h"
#include "loom/cli/job_commands.h"
#include "loom/cli/sim_command.h"
#include "loom/common/version.h"
#include "loom/server/server_command.h"

int main(int argc, char** argv) {
#ifdef NDEBUG
  // Debian's abseil checks every Mutex acquisition for lock-order cycles
  // (its debug default); in the optimised binary that bookkeeping was a
  // visible share of the agent's and server's CPU. Tests and the sanitizer
  // build keep the checks.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  // A batch job's programs (docs/sbatch.md): the `srun` and `scontrol` on
  // a batch script's PATH are links to this binary, and every task of a
  // `loom sbatch` job runs `loom _batch`.
  const std::string_view self = argc > 0 ? argv[0] : "loom";
  const std::string_view base = self.substr(self.rfind('/') + 1);
  std::vector<std::string> rest(argv + (argc > 0 ? 1 : 0), argv + argc);
  if (base == "srun") return loom::batch::RunSrun(rest);
  if (argc > 1 && std::string_view(argv[1]) == "srun") {
    return loom::batch::RunSrun({rest.begin() + 1, rest.end()});
  }
  if (argc > 1 && std::string_view(argv[1]) == "_batch") {
    return loom::batch::RunBatchTask({rest.begin() + 1, rest.end()});
  }
  std::vector<char*> args(argv, argv + argc);
  std::string scontrol = "scontrol";
  if (base == "scontrol") args.insert(args.begin() + 1, scontrol.data());
  argc = static_cast<int>(args.size());
  argv = args.data();

  CLI::App app{"loom: a GPU cluster scheduler and orchestrator", "loom"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("loom ") + loom::kLoomVersion);
  loom::SimFlags sim_flags;
  CLI::App* sim = loom::AddSimCommand(app, &sim_flags);
  loom::ServerFlags server_flags;
  CLI::App* server = loom::AddServerCommand(app, &server_flags);
  loom::AgentFlags agent_flags;
  CLI::App* agent = loom::AddAgentCommand(app, &agent_flags);
  loom::DevFlags dev_flags;
  CLI::App* dev = loom::AddDevCommand(app, &dev_flags);
  loom::GatewayFlags gateway_flags;
  CLI::App* gateway = loom::AddGatewayCommand(app, &gateway_flags);
  loom::JobCommandFlags job_flags;
  loom::AddJobCommands(app, &job_flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; bad usage exits 2 (docs/cli.md).
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!job_flags.server.empty() || !job_flags.token_file.empty() ||
      !job_flags.output.empty()) {
    // Given before the verb: only the client verbs take them.
    for (CLI::App* daemon : {sim, server, agent, dev, gateway}) {
      if (daemon->parsed()) {
        std::cerr << "loom " << daemon->get_name()
                  << ": --server, --token-file and -o before the verb are "
                     "options of the client verbs; give this verb's own "
                     "options after it\n";
        return 2;
      }
    }
  }
  if (sim->parsed()) return loom::RunSim(sim_flags);
  if (server->parsed()) return loom::RunServer(server_flags);
  if (agent->parsed()) return loom::RunAgent(agent_flags);
  if (dev->parsed()) return loom::RunDev(dev_flags);
  if (gateway->parsed()) return loom::RunGateway(gateway_flags);

  if (std::optional<int> rc = loom::RunJobCommands(job_flags)) return *rc;
  return 2;
}
