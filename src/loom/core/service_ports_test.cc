// The gateway ports services may take (service_ports.h): the cluster
// spec's `services.port_range` and `projects[].service_ports`, their
// errors, the check a service's port must pass, and `loom plan`'s lines.

#include "loom/core/service_ports.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/core/cluster_diff.h"
#include "loom/core/cluster_spec.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A project with `ports` beyond the cluster's range.
ProjectSpec ProjectWithPorts(std::string name,
                             std::vector<ServicePortRange> ports) {
  ProjectSpec p;
  p.name = std::move(name);
  p.service_ports = std::move(ports);
  return p;
}

constexpr char kOnePool[] =
    "pools:\n  - {name: h200, nodes: 1, gpu: {model: h200, count: 8}, cpus: 8, "
    "memory: 64Gi}\n";

TEST(ServicePortsSpec, DefaultsToTheNodePortRange) {
  absl::StatusOr<Cluster> c = ParseClusterSpec(kOnePool, "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->services.port_range, (ServicePortRange{30000, 32767}));
  EXPECT_EQ(Cluster().services.port_range, (ServicePortRange{30000, 32767}));
}

TEST(ServicePortsSpec, ReadsTheRangeAndAProjectsPorts) {
  absl::StatusOr<Cluster> c = ParseClusterSpec(
      absl::StrCat(kOnePool,
                   "services: {port_range: 40000-40999}\n"
                   "projects:\n"
                   "  - {name: search, service_ports: [80, 443, \"8000-8099\", "
                   "9000-9001]}\n"
                   "  - {name: research}\n"),
      "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->services.port_range, (ServicePortRange{40000, 40999}));
  EXPECT_THAT(
      c->FindProject("search")->service_ports,
      ElementsAre(ServicePortRange{80, 80}, ServicePortRange{443, 443},
                  ServicePortRange{8000, 8099}, ServicePortRange{9000, 9001}));
  EXPECT_TRUE(c->FindProject("research")->service_ports.empty());
  absl::StatusOr<Cluster> one = ParseClusterSpec(
      absl::StrCat(kOnePool, "services: {port_range: 8080}\n"), "c.yaml");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->services.port_range, (ServicePortRange{8080, 8080}));
}

TEST(ServicePortsSpec, BadInputNamesTheFileLineAndField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"services: [x]", "c.yaml:3:11: services: must be a map"},
      {"services: {port_ranges: 1-2}",
       "c.yaml:3:12: services.port_ranges: unknown field 'port_ranges'"},
      {"services: {port_range: 30000-}",
       "c.yaml:3:24: services.port_range: must be a port (1-65535) or a range "
       "of them (\"8000-8099\"), got '30000-'"},
      {"services: {port_range: 0-100}",
       "c.yaml:3:24: services.port_range: must be a port"},
      {"services: {port_range: 1-65536}",
       "c.yaml:3:24: services.port_range: must be a port"},
      {"services: {port_range: 32767-30000}",
       "c.yaml:3:24: services.port_range: '32767-30000': the first port is "
       "above the last"},
      {"services: {port_range: [1, 2]}", "c.yaml:3:24: services.port_range:"},
      {"projects:\n  - {name: a, service_ports: 80}",
       "c.yaml:4:30: projects[0].service_ports: must be a list"},
      {"projects:\n  - {name: a, service_ports: [80, http]}",
       "c.yaml:4:35: projects[0].service_ports[1]: must be a port (1-65535) "
       "or a range of them (\"8000-8099\"), got 'http'"},
      {"projects:\n  - {name: a, service_ports: [\"8000-8099\", 8080]}",
       "c.yaml:4:44: projects[0].service_ports[1]: 8080 overlaps "
       "projects[0].service_ports[0] (8000-8099)"},
      {"projects:\n  - {name: a, service_ports: [-1]}",
       "c.yaml:4:31: projects[0].service_ports[0]: must be a port"},
  };
  for (const auto& [yaml, expected] : cases) {
    absl::StatusOr<Cluster> c =
        ParseClusterSpec(absl::StrCat(kOnePool, yaml, "\n"), "c.yaml");
    ASSERT_FALSE(c.ok()) << yaml;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(expected)) << yaml;
  }
}

TEST(CheckServicePortTest, TheRangeForAllAndAProjectsPortsForItAlone) {
  Cluster c;
  c.projects.push_back(ProjectWithPorts("search", {{80, 80}, {8000, 8099}}));
  c.projects.push_back(ProjectWithPorts("research", {}));
  EXPECT_TRUE(CheckServicePort(c, "research", 30000).ok());
  EXPECT_TRUE(CheckServicePort(c, "research", 32767).ok());
  EXPECT_TRUE(CheckServicePort(c, "search", 80).ok());
  EXPECT_TRUE(CheckServicePort(c, "search", 8050).ok());
  const absl::Status other = CheckServicePort(c, "research", 80);
  EXPECT_EQ(other.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(other.message(),
            "port: 80 is not a service port of this cluster "
            "(services.port_range: 30000-32767; project research's "
            "service_ports: none); choose one of these, or leave `port` out "
            "to be given one, or ask an operator to allow it "
            "(projects[].service_ports in the cluster spec)");
  const absl::Status ssh = CheckServicePort(c, "search", 22);
  EXPECT_EQ(ssh.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ssh.message()),
              HasSubstr("port: 22 is not a service port of this cluster "
                        "(services.port_range: 30000-32767; project search's "
                        "service_ports: 80, 8000-8099)"));
  EXPECT_FALSE(CheckServicePort(c, "undeclared", 29999).ok());
  EXPECT_FALSE(CheckServicePort(c, "search", 32768).ok());
}

TEST(ServicePortsDiff, PlanSaysTheRangeAndAProjectsPorts) {
  Cluster a;
  a.projects.push_back(ProjectWithPorts("search", {}));
  Cluster b = a;
  b.services.port_range = {40000, 40999};
  b.projects[0].service_ports = {{80, 80}, {8000, 8099}};
  std::vector<std::string> lines;
  for (const ClusterDiffLine& l : DiffClusters(a, b)) {
    lines.push_back(FormatDiffLine(l));
  }
  EXPECT_THAT(lines,
              ElementsAre("~ project search: service_ports [] -> [80, "
                          "8000-8099]",
                          "~ services port_range: 30000-32767 -> 40000-40999"));
}

}  // namespace
}  // namespace loom
