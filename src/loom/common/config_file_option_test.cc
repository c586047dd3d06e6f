// `--config FILE` (config_file_option.h): keys are flag names, the command
// line wins, and a bad file is an error naming the file and the key.

#include "loom/common/config_file_option.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

// A program like `loom agent`: a required flag, a flag with a default, a
// boolean flag, a boolean option, an integer, a repeatable option and a
// checked one.
struct Flags {
  std::string server;
  std::string data_dir = "/var/lib/loom";
  bool fake = false;
  bool run_as_user = true;
  int cpus = 0;
  std::vector<std::string> registries;
  std::string store = "sqlite";
};

// Adds `agent` with those flags and --config to `app`.
void AddProgram(CLI::App& app, Flags& flags) {
  CLI::App* cmd = app.add_subcommand("agent", "test program");
  cmd->add_option("--server", flags.server, "")->required();
  cmd->add_option("--data-dir", flags.data_dir, "");
  cmd->add_flag("--fake-tasks", flags.fake, "");
  cmd->add_option("--run-as-user", flags.run_as_user, "");
  cmd->add_option("--emulate-cpus", flags.cpus, "");
  cmd->add_option("--insecure-registry", flags.registries, "");
  cmd->add_option("--store", flags.store, "")
      ->check(CLI::IsMember({"sqlite", "etcd"}));
  AddConfigFileOption(cmd);
}

// Parses `loom agent ARGS...` into `flags`; the error's message, "" when
// it parsed.
std::string Parse(Flags& flags, std::vector<std::string> args) {
  CLI::App app{"loom"};
  AddProgram(app, flags);
  args.insert(args.begin(), "agent");
  std::reverse(args.begin(), args.end());  // CLI11 takes them reversed
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

class ConfigFileTest : public ::testing::Test {
 protected:
  ~ConfigFileTest() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& text) {
    std::filesystem::create_directories(dir_);
    const std::string path = dir_ + "/agent.toml";
    std::ofstream(path) << text;
    return path;
  }
  std::string Parse(std::vector<std::string> args) {
    return loom::Parse(flags_, std::move(args));
  }

  const std::string dir_ =
      ::testing::TempDir() + "/config_file_test." + std::to_string(::getpid());
  Flags flags_;
};

TEST_F(ConfigFileTest, KeysAreFlagNamesAndTheCommandLineWins) {
  const std::string path = Write(
      "# the packaged agent\n"
      "server = \"http://10.0.0.1:7000\"\n"
      "data-dir = '/srv/loom'\n"
      "fake-tasks = true\n"
      "run-as-user = false\n"
      "emulate-cpus = 96\n"
      "insecure-registry = [\"a:5000\", \"b:5000\"]\n"
      "store = \"etcd\"\n");
  ASSERT_EQ(Parse({"--config", path, "--emulate-cpus", "8"}), "");
  EXPECT_EQ(flags_.server, "http://10.0.0.1:7000");  // required, from file
  EXPECT_EQ(flags_.data_dir, "/srv/loom");
  EXPECT_TRUE(flags_.fake);
  EXPECT_FALSE(flags_.run_as_user);
  EXPECT_EQ(flags_.cpus, 8);  // the command line's
  EXPECT_EQ(flags_.registries, (std::vector<std::string>{"a:5000", "b:5000"}));
  EXPECT_EQ(flags_.store, "etcd");
}

TEST_F(ConfigFileTest, OrderOfFlagsDoesNotMatter) {
  const std::string path = Write("server = \"http://a:7000\"\n");
  ASSERT_EQ(Parse({"--server", "http://b:7000", "--config", path}), "");
  EXPECT_EQ(flags_.server, "http://b:7000");
}

TEST_F(ConfigFileTest, WithoutTheFileRequiredFlagsAreStillRequired) {
  const std::string path = Write("data-dir = \"/srv\"\n");
  EXPECT_THAT(Parse({"--config", path}), HasSubstr("--server is required"));
}

TEST_F(ConfigFileTest, BadFilesNameTheFileAndTheKey) {
  struct Case {
    std::string text;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"server = \"x\"\nsevrer = \"y\"\n",
       "key 'sevrer': not a flag of `loom agent`"},
      {"server = \"x\"\nserver = \"y\"\n",
       "key 'server': --server: At Most 1 required but received 2"},
      {"server = \"x\"\nstore = \"etcd\"\nserver = \"y\"\n",
       "key 'server': given twice"},
      {"server = \"x\"\nemulate-cpus = \"many\"\n", "key 'emulate-cpus': "},
      {"server = \"x\"\nstore = \"postgres\"\n", "key 'store': "},
      {"server = \"x\"\nfake-tasks = maybe\n", "key 'fake-tasks': "},
      {"[agent]\nserver = \"x\"\n", "section [agent]: sections"},
      {"server = \"x\"\nconfig = \"/etc/other.toml\"\n", "key 'config': "},
      {"server = \"x\"\nhelp = true\n", "key 'help': "},
      {"garbage line\n", "key 'garbage line': not a flag"},
  };
  for (const Case& c : cases) {
    Flags flags;
    const std::string path = Write(c.text);
    EXPECT_THAT(loom::Parse(flags, {"--config", path}),
                HasSubstr(path + ": " + c.error))
        << c.text;
  }
}

TEST_F(ConfigFileTest, AMissingFileIsNamed) {
  const std::string path = dir_ + "/absent.toml";
  EXPECT_THAT(Parse({"--config", path}),
              HasSubstr(path + ": cannot read the config file"));
}

}  // namespace
}  // namespace loom
