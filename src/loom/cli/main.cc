// `loom`: one binary, many verbs.

#include <iostream>

#include "CLI/CLI.hpp"
#include "loom/cli/sim_command.h"

int main(int argc, char** argv) {
  CLI::App app{"loom: a GPU cluster scheduler and orchestrator", "loom"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "loom 0.1.0");
  loom::SimFlags sim_flags;
  CLI::App* sim = loom::AddSimCommand(app, &sim_flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (sim->parsed()) return loom::RunSim(sim_flags);
  return 2;
}
