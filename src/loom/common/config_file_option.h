#pragma once

// `--config FILE` for a program's flags (`loom agent`, `loom server`): a
// TOML file of `key = value` lines whose keys are the program's long flag
// names without the dashes (`data-dir = "/var/lib/loom/agent"`,
// `fake-tasks = true`, `insecure-registry = ["a:5000", "b:5000"]`). A flag
// given on the command line wins over the file. An unknown key, a section,
// a value the flag refuses (two for a flag that takes one) is a
// `CLI::ConfigError` naming the file and the key (the programs exit 2 on it, as
// on any bad flag). docs/agent.md, "Config file".
//
// Header-only: loom_common does not link CLI11; the programs that include
// this do.

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace loom {

// Sets every flag of `app` that the command line left unset from the TOML
// file `path`. Throws `CLI::ConfigError` naming `path` and the key.
inline void ApplyConfigFile(CLI::App* app, const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw CLI::ConfigError(
        path + ": cannot read the config file: " + std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    throw CLI::ConfigError(path + ": cannot read the config file");
  }
  std::vector<CLI::ConfigItem> items;
  try {
    std::istringstream lines(text.str());
    items = CLI::ConfigTOML().from_config(lines);
  } catch (const CLI::ParseError& e) {
    throw CLI::ConfigError(path + ": " + e.what());
  }
  // Flags the command line set: they win, and are left alone. Collected
  // before any key is applied, so that a key given twice (apart, or as two
  // names of one flag) is an error.
  std::set<const CLI::Option*> from_command_line;
  for (const CLI::Option* op : app->get_options()) {
    if (op->count() > 0) from_command_line.insert(op);
  }
  std::set<const CLI::Option*> from_file;
  const std::string program = app->get_parent() != nullptr
                                  ? "`loom " + app->get_name() + "`"
                                  : "`" + app->get_name() + "`";
  for (const CLI::ConfigItem& item : items) {
    std::string where = path + ": key '" + item.fullname() + "'";
    if (item.name == "++" || item.name == "--") {  // a [section] opens, closes
      where = path + ": section [" + CLI::detail::join(item.parents, ".") + "]";
    }
    if (!item.parents.empty()) {
      throw CLI::ConfigError(
          where +
          ": sections and dotted keys are not read; keys are flag names "
          "without the dashes, at the top of the file");
    }
    CLI::Option* op = app->get_option_no_throw("--" + item.name);
    if (op == nullptr || !op->get_configurable() || op->get_lnames().empty() ||
        item.name == "help") {
      throw CLI::ConfigError(where + ": not a flag of " + program +
                             " that a config file may set (keys are the "
                             "flag names of --help without the dashes, "
                             "e.g. data-dir)");
    }
    // (CLI11 merges a key given twice in a row into one item of both values.)
    if (!from_file.insert(op).second) {
      throw CLI::ConfigError(where + ": given twice");
    }
    if (from_command_line.count(op) > 0) continue;
    try {
      if (op->get_expected_min() == 0) {  // a flag: true or false
        op->add_result(
            op->get_flag_value(item.name, CLI::ConfigTOML().to_flag(item)));
      } else {
        op->add_result(item.inputs);
      }
      op->run_callback();
    } catch (const CLI::ParseError& e) {
      throw CLI::ConfigError(where + ": " + e.what());
    }
  }
}

// Adds `--config FILE` to `app` (a program's subcommand): the file's keys
// are applied when the command line is parsed, before required flags are
// checked, so a required flag may come from the file.
inline CLI::Option* AddConfigFileOption(CLI::App* app) {
  CLI::Option* option = app->add_option_function<std::string>(
      "--config",
      [app](const std::string& path) { ApplyConfigFile(app, path); },
      "TOML file of flags: `key = value` lines, keys the long flag names "
      "without the dashes (data-dir = \"/var/lib/loom\"); flags on the "
      "command line win");
  option->configurable(false);
  return option;
}

}  // namespace loom
