#pragma once

// Reading the service port parts of a cluster spec: its `services:` and a
// project's `service_ports:`. Internal to `core`, like yaml_util.h.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/core/cluster.h"
#include "loom/core/yaml_util.h"

namespace loom::internal {

// A cluster spec's `services` field: {port_range: "N-M"}. Errors are
// `reader`'s, naming "services.port_range".
absl::StatusOr<ServicePolicy> ParseServicePolicy(const yaml::Reader& reader,
                                                 const yaml::Field& field);

// A project's `service_ports` field at `path` ("projects[0].service_ports"):
// a list of ports and ranges (80, "8000-8099"), none overlapping another.
absl::StatusOr<std::vector<ServicePortRange>> ParseServicePorts(
    const yaml::Reader& reader, const yaml::Field& field,
    const std::string& path);

}  // namespace loom::internal
