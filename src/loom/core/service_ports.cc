#include "loom/core/service_ports.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/core/service_ports_yaml.h"
#include "yaml-cpp/yaml.h"

namespace loom {
namespace {

// A port written as digits alone, 1..65535; -1 otherwise.
int ParsePort(std::string_view text) {
  if (text.empty() || text.size() > 5) return -1;
  int out = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  if (ec != std::errc() || ptr != end || out < 1 || out > 65535) return -1;
  return out;
}

}  // namespace

std::string ServicePortRangeText(const ServicePortRange& r) {
  return r.first == r.last ? absl::StrCat(r.first)
                           : absl::StrCat(r.first, "-", r.last);
}

std::string ServicePortRangesText(const std::vector<ServicePortRange>& ranges) {
  std::vector<std::string> parts;
  for (const ServicePortRange& r : ranges)
    parts.push_back(ServicePortRangeText(r));
  return absl::StrJoin(parts, ", ");
}

absl::StatusOr<ServicePortRange> ParseServicePortRange(std::string_view text) {
  const size_t dash = text.find('-');
  const std::string_view a = text.substr(0, dash);
  const std::string_view b =
      dash == std::string_view::npos ? a : text.substr(dash + 1);
  ServicePortRange r{ParsePort(a), ParsePort(b)};
  if (r.first < 0 || r.last < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "must be a port (1-65535) or a range of them (\"8000-8099\"), got '",
        std::string(text), "'"));
  }
  if (r.first > r.last) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", std::string(text), "': the first port is above the ", "last"));
  }
  return r;
}

bool InServicePortRange(const ServicePortRange& r, int port) {
  return port >= r.first && port <= r.last;
}

absl::Status CheckServicePort(const Cluster& cluster, std::string_view project,
                              int port) {
  if (InServicePortRange(cluster.services.port_range, port))
    return absl::OkStatus();
  const ProjectSpec* p = cluster.FindProject(project);
  if (p != nullptr) {
    for (const ServicePortRange& r : p->service_ports) {
      if (InServicePortRange(r, port)) return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "port: ", port,
      " is not a service port of this cluster (services.port_range: ",
      ServicePortRangeText(cluster.services.port_range), "; project ",
      std::string(project), "'s service_ports: ",
      p == nullptr || p->service_ports.empty()
          ? "none"
          : ServicePortRangesText(p->service_ports),
      "); choose one of these, or leave `port` out to be given one, or ask "
      "an operator to allow it (projects[].service_ports in the cluster "
      "spec)"));
}

namespace internal {

using yaml::ChildPath;
using yaml::ElementPath;
using yaml::Field;
using yaml::MapNode;

absl::StatusOr<ServicePolicy> ParseServicePolicy(const yaml::Reader& r,
                                                 const Field& field) {
  absl::StatusOr<MapNode> map =
      r.ReadMap(field.value, field.key, {"port_range"});
  if (!map.ok()) return map.status();
  ServicePolicy policy;
  const Field* f = map->Find("port_range");
  if (f == nullptr) return policy;
  const std::string path = ChildPath(map->path, "port_range");
  absl::StatusOr<std::string> text = r.ReadString(f->value, path);
  if (!text.ok()) return text.status();
  absl::StatusOr<ServicePortRange> range = ParseServicePortRange(*text);
  if (!range.ok()) return r.Error(f->value, path, range.status().message());
  policy.port_range = *range;
  return policy;
}

absl::StatusOr<std::vector<ServicePortRange>> ParseServicePorts(
    const yaml::Reader& r, const Field& field, const std::string& path) {
  absl::StatusOr<std::vector<YAML::Node>> items =
      r.ReadList(field.value, path, /*allow_empty=*/true);
  if (!items.ok()) return items.status();
  std::vector<ServicePortRange> out;
  for (size_t i = 0; i < items->size(); ++i) {
    const YAML::Node& item = (*items)[i];
    const std::string item_path = ElementPath(path, i);
    const YAML::Mark mark =
        item.Mark().line >= 0 ? item.Mark() : field.value.Mark();
    absl::StatusOr<std::string> text = r.ReadString(item, item_path);
    if (!text.ok()) return text.status();
    absl::StatusOr<ServicePortRange> range = ParseServicePortRange(*text);
    if (!range.ok()) return r.Error(mark, item_path, range.status().message());
    for (size_t k = 0; k < out.size(); ++k) {
      if (range->first <= out[k].last && out[k].first <= range->last) {
        return r.Error(mark, item_path,
                       absl::StrCat(ServicePortRangeText(*range), " overlaps ",
                                    ElementPath(path, k), " (",
                                    ServicePortRangeText(out[k]), ")"));
      }
    }
    out.push_back(*range);
  }
  return out;
}

}  // namespace internal
}  // namespace loom
