#pragma once

// The gateway ports inference services may take (docs/services.md, "Ports";
// docs/cluster-spec.md, `services` and `projects[].service_ports`). The
// gateway binds a service's port on its host, as root where it runs as
// root, so a user must not pick any port: only the cluster's range
// (30000-32767 by default, as Kubernetes' NodePort range) and the ports an
// operator allows the service's project.

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/core/cluster.h"

namespace loom {

// "30000-32767", or "80" for a range of one port.
std::string ServicePortRangeText(const ServicePortRange& range);
// Ranges joined with ", ".
std::string ServicePortRangesText(const std::vector<ServicePortRange>& ranges);

// Reads "N" or "N-M": ports 1..65535, N <= M. InvalidArgument saying why
// not, quoting `text`.
absl::StatusOr<ServicePortRange> ParseServicePortRange(std::string_view text);

bool InServicePortRange(const ServicePortRange& range, int port);

// OK when `port` is in `cluster.services.port_range` or in the
// `service_ports` of `project` (a project the spec does not declare has
// none). Otherwise InvalidArgument naming the `port` field, the cluster's
// range and the project's ports, e.g. "port: 22 is not a service port of
// this cluster (services.port_range: 30000-32767; project search's
// service_ports: none); ...".
absl::Status CheckServicePort(const Cluster& cluster, std::string_view project,
                              int port);

}  // namespace loom
