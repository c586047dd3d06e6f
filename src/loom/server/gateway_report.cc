#include "loom/server/gateway_report.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace loom {
namespace {

absl::Status ReadNumber(const nlohmann::json& j, const char* key,
                        const std::string& path, double* out) {
  auto it = j.find(key);
  if (it == j.end()) return absl::OkStatus();  // optional: 0
  if (!it->is_number() || !std::isfinite(it->get<double>()) ||
      it->get<double>() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ".", key, ": must be a number, at least 0, got ", it->dump()));
  }
  *out = it->get<double>();
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadName(const nlohmann::json& j,
                                     const std::string& path) {
  auto it = j.find("name");
  if (it == j.end() || !it->is_string() ||
      it->get_ref<const std::string&>().empty() ||
      it->get_ref<const std::string&>().size() > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".name: must be a string of 1 to 128 bytes"));
  }
  return it->get<std::string>();
}

}  // namespace

absl::StatusOr<std::map<std::string, GatewayStats>> ParseGatewayReport(
    const nlohmann::json& body, absl::Time now) {
  if (!body.is_object()) {
    return absl::InvalidArgumentError("body: must be a JSON object");
  }
  std::string gateway;
  if (auto g = body.find("gateway"); g != body.end()) {
    if (!g->is_string() || g->get_ref<const std::string&>().size() > 128) {
      return absl::InvalidArgumentError(
          "gateway: must be a string of at most 128 bytes");
    }
    gateway = g->get<std::string>();
  }
  auto list = body.find("services");
  if (list == body.end() || !list->is_array()) {
    return absl::InvalidArgumentError("services: must be a list");
  }
  if (list->size() > kMaxReportServices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "services: at most ", kMaxReportServices, ", got ", list->size()));
  }
  std::map<std::string, GatewayStats> out;
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& s = (*list)[i];
    const std::string path = absl::StrCat("services[", i, "]");
    if (!s.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": must be a map"));
    }
    absl::StatusOr<std::string> name = ReadName(s, path);
    if (!name.ok()) return name.status();
    GatewayStats st;
    st.at = now;
    st.gateway = gateway;
    for (auto [key, field] :
         {std::pair<const char*, double*>{"in_flight", &st.in_flight},
          {"rps", &st.rps},
          {"p95_ms", &st.p95_ms},
          {"requests_total", &st.requests_total},
          {"errors_total", &st.errors_total}}) {
      if (absl::Status e = ReadNumber(s, key, path, field); !e.ok()) return e;
    }
    if (auto srv = s.find("servers"); srv != s.end()) {
      if (!srv->is_array() || srv->size() > kMaxReportServers) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ".servers: must be a list of at most ", kMaxReportServers));
      }
      for (size_t k = 0; k < srv->size(); ++k) {
        const nlohmann::json& v = (*srv)[k];
        const std::string spath = absl::StrCat(path, ".servers[", k, "]");
        if (!v.is_object()) {
          return absl::InvalidArgumentError(
              absl::StrCat(spath, ": must be a map"));
        }
        absl::StatusOr<std::string> sname = ReadName(v, spath);
        if (!sname.ok()) return sname.status();
        GatewayServer gs;
        const std::string state = v.value("state", std::string());
        gs.serving = state == "serving";
        gs.draining = state == "draining";
        double sessions = 0;
        if (absl::Status e = ReadNumber(v, "sessions", spath, &sessions);
            !e.ok()) {
          return e;
        }
        gs.sessions = static_cast<int>(std::min(sessions, 1e9));
        st.servers[*sname] = gs;
      }
    }
    out[*name] = std::move(st);
  }
  return out;
}

}  // namespace loom
