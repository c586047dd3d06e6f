// `loom agent`'s flags (agent_command.h, agent_address.h): listen
// addresses, server URLs, the command line to `AgentOptions`, signals.

#include "loom/agent/agent_command.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent.h"
#include "loom/agent/agent_address.h"
#include "loom/agent/agent_test_util.h"
#include "loom/core/job_spec.h"

namespace loom {
namespace {

using agent_testing::kGi;
using ::testing::HasSubstr;

TEST(AgentFlagsTest, ListenAddress) {
  absl::StatusOr<ListenAddress> a = ParseListenAddress("127.0.0.2:7100");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "127.0.0.2");
  EXPECT_EQ(a->port, 7100);
  a = ParseListenAddress("localhost:0");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->port, 0);
  EXPECT_TRUE(ParseListenAddress("[::1]:7100").ok());
  for (const char* bad : {"", "127.0.0.1", "127.0.0.1:", ":7100",
                          "127.0.0.1:70000", "0.0.0.0:7100", "[::]:7100",
                          "192.0.2.1:7100", "::1:7100", "127.0.0.1:x"}) {
    EXPECT_FALSE(ParseListenAddress(bad).ok()) << bad;
  }
  EXPECT_THAT(
      std::string(ParseListenAddress("192.0.2.1:7100").status().message()),
      HasSubstr("nor an address of this host"));
}

TEST(AgentFlagsTest, ServerUrls) {
  EXPECT_EQ(NormalizeAgentServerUrl("127.0.0.1:7000").value(),
            "http://127.0.0.1:7000");
  EXPECT_EQ(NormalizeAgentServerUrl("http://localhost:7000/").value(),
            "http://localhost:7000");
  EXPECT_EQ(NormalizeAgentServerUrl("HTTP://[::1]:7000").value(),
            "http://[::1]:7000");
  for (const char* bad : {"", "ftp://x:1", "http://x:1/v1", "http://", "x:0",
                          "x:", "http://x:99999"}) {
    EXPECT_FALSE(NormalizeAgentServerUrl(bad).ok()) << bad;
  }
}

TEST(AgentFlagsTest, CommandLineToOptions) {
  CLI::App app{"loom"};
  AgentFlags flags;
  AddAgentCommand(app, &flags);
  app.parse(std::vector<std::string>{
      // CLI11 takes the arguments in reverse order.
      "2s",
      "--stop-signal-grace",
      "USR1",
      "--stop-signal",
      "500ms",
      "--heartbeat-interval",
      "--fake-tasks",
      "4",
      "--names-from",
      "h200",
      "--name-prefix",
      "3",
      "--emulate-nodes",
      "8xH200",
      "--emulate",
      "/tmp/x",
      "--data-dir",
      "127.0.0.2:0",
      "--listen",
      "127.0.0.1:7000,http://127.0.0.1:7001",
      "--server",
      "agent"});
  absl::StatusOr<AgentOptions> o = AgentOptionsFromFlags(flags);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->server_urls,
            (std::vector<std::string>{"http://127.0.0.1:7000",
                                      "http://127.0.0.1:7001"}));
  EXPECT_EQ(o->listen_host, "127.0.0.2");
  EXPECT_EQ(o->node_names,
            (std::vector<std::string>{"h200-4", "h200-5", "h200-6"}));
  EXPECT_TRUE(o->fleet);
  EXPECT_TRUE(o->fake_tasks);
  EXPECT_EQ(o->emulation->cpus, 192);
  EXPECT_EQ(o->heartbeat_interval, absl::Milliseconds(500));
  EXPECT_EQ(o->stop_signal, SIGUSR1);
  EXPECT_EQ(o->stop_grace, absl::Seconds(2));
  EXPECT_TRUE(o->run_as_user);

  AgentFlags f;
  f.servers = "127.0.0.1:7000";
  f.listen = "127.0.0.1:0";
  f.data_dir = "/tmp/x";
  f.name = "a100-3";
  f.emulate = "8xA100";
  f.emulate_cpus = 64;
  f.emulate_memory = "512Gi";
  o = AgentOptionsFromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->node_names, std::vector<std::string>{"a100-3"});
  EXPECT_FALSE(o->fleet);
  EXPECT_EQ(o->emulation->cpus, 64);
  EXPECT_EQ(o->emulation->memory_bytes, 512 * kGi);
  EXPECT_EQ(o->stop_signal, SIGTERM);
  EXPECT_EQ(o->stop_grace, absl::Seconds(10));

  {
    CLI::App off_app{"loom"};
    AgentFlags off;
    AddAgentCommand(off_app, &off);
    off_app.parse(std::vector<std::string>{
        "--run-as-user=false", "/tmp/x", "--data-dir", "127.0.0.1:0",
        "--listen", "127.0.0.1:7000", "--server", "agent"});
    absl::StatusOr<AgentOptions> no_switch = AgentOptionsFromFlags(off);
    ASSERT_TRUE(no_switch.ok()) << no_switch.status();
    EXPECT_FALSE(no_switch->run_as_user);
  }

  AgentFlags bad = f;
  bad.emulate.clear();
  EXPECT_FALSE(AgentOptionsFromFlags(bad).ok());  // --emulate-cpus alone
  bad = f;
  bad.emulate_nodes = 3;
  bad.emulate.clear();
  bad.emulate_cpus = 0;
  bad.emulate_memory.clear();
  EXPECT_FALSE(AgentOptionsFromFlags(bad).ok());  // fleet without --emulate
  bad = f;
  bad.name_prefix = "x";
  EXPECT_FALSE(AgentOptionsFromFlags(bad).ok());
  bad = f;
  bad.stop_signal = "NOPE";
  EXPECT_FALSE(AgentOptionsFromFlags(bad).ok());
  bad = f;
  bad.heartbeat_interval = "1ms";
  EXPECT_FALSE(AgentOptionsFromFlags(bad).ok());
  bad = f;
  bad.listen = "0.0.0.0:7100";
  EXPECT_FALSE(AgentOptionsFromFlags(bad).ok());

  // --cdi-dir: unset by default (the agent picks by real or emulated GPUs),
  // repeatable, absolute.
  EXPECT_FALSE(o->cdi_dirs.has_value());
  {
    CLI::App cdi_app{"loom"};
    AgentFlags cdi;
    AddAgentCommand(cdi_app, &cdi);
    cdi_app.parse(std::vector<std::string>{
        "/run/cdi-b", "--cdi-dir", "/etc/cdi-a", "--cdi-dir", "/tmp/x",
        "--data-dir", "127.0.0.1:0", "--listen", "127.0.0.1:7000", "--server",
        "agent"});
    absl::StatusOr<AgentOptions> with = AgentOptionsFromFlags(cdi);
    ASSERT_TRUE(with.ok()) << with.status();
    EXPECT_EQ(with->cdi_dirs,
              (std::vector<std::string>{"/etc/cdi-a", "/run/cdi-b"}));
    cdi.cdi_dirs = {"relative/cdi"};
    absl::StatusOr<AgentOptions> relative = AgentOptionsFromFlags(cdi);
    EXPECT_FALSE(relative.ok());
    EXPECT_THAT(std::string(relative.status().message()),
                HasSubstr("--cdi-dir"));
  }

  // --service-ports: 20000-29999 by default; a range, named when bad.
  EXPECT_EQ(o->service_ports.first, 20000);
  EXPECT_EQ(o->service_ports.last, 29999);
  {
    AgentFlags ports = f;
    ports.service_ports = "30000-30009";
    absl::StatusOr<AgentOptions> with = AgentOptionsFromFlags(ports);
    ASSERT_TRUE(with.ok()) << with.status();
    EXPECT_EQ(with->service_ports.first, 30000);
    EXPECT_EQ(with->service_ports.last, 30009);
    ports.service_ports = "30009-30000";
    absl::StatusOr<AgentOptions> reversed = AgentOptionsFromFlags(ports);
    EXPECT_FALSE(reversed.ok());
    EXPECT_THAT(std::string(reversed.status().message()),
                HasSubstr("--service-ports: '30009-30000'"));
  }

  EXPECT_EQ(ParseSignal("TERM").value(), SIGTERM);
  EXPECT_EQ(ParseSignal("sigusr1").value(), SIGUSR1);
  EXPECT_EQ(ParseSignal("9").value(), SIGKILL);
  EXPECT_FALSE(ParseSignal("0").ok());
  EXPECT_FALSE(ParseSignal("SIGNOPE").ok());
}

// --registry-auth: the file's credentials reach the options; a file others
// may read is refused, naming the flag.
TEST(AgentFlagsTest, RegistryAuth) {
  char tmpl[] = "/tmp/agent_registry_auth.XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string path = dir + "/auth.json";
  std::ofstream(path) << R"({"auths": {"localhost:5000": {"username": "ci",)"
                      << R"( "password": "s3cret"}}})";
  AgentFlags f;
  f.servers = "127.0.0.1:7000";
  f.listen = "127.0.0.1:0";
  f.data_dir = "/tmp/x";
  f.registry_auth = path;
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  absl::StatusOr<AgentOptions> o = AgentOptionsFromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_NE(o->registry_credentials.For("localhost:5000"), nullptr);
  EXPECT_EQ(o->registry_credentials.For("localhost:5000")->username, "ci");
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  o = AgentOptionsFromFlags(f);
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status().message()),
              HasSubstr("--registry-auth: " + path + " has mode 0644"));
  f.registry_auth = dir + "/none.json";
  EXPECT_FALSE(AgentOptionsFromFlags(f).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace loom
