#include "loom/server/gateway_report.h"

#include <algorithm>
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

// "latency": {"buckets_ms": [[le, cumulative count], ...], "count", "sum_ms"}.
absl::Status ReadLatency(const nlohmann::json& s, const std::string& path,
                         LatencyBuckets* out) {
  auto it = s.find("latency");
  if (it == s.end()) return absl::OkStatus();
  const std::string at = path + ".latency";
  if (!it->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(at, ": must be a map"));
  }
  double count = 0, sum = 0;
  if (absl::Status e = ReadNumber(*it, "count", at, &count); !e.ok()) return e;
  if (absl::Status e = ReadNumber(*it, "sum_ms", at, &sum); !e.ok()) return e;
  auto b = it->find("buckets_ms");
  if (b == it->end() || !b->is_array() || b->size() > kMaxLatencyBuckets) {
    return absl::InvalidArgumentError(
        absl::StrCat(at, ".buckets_ms: must be a list of at most ",
                     kMaxLatencyBuckets, " [le, count] pairs"));
  }
  LatencyBuckets l;
  l.count = static_cast<uint64_t>(std::min(count, 1e18));
  l.sum_seconds = sum / 1000;
  for (size_t i = 0; i < b->size(); ++i) {
    const nlohmann::json& pair = (*b)[i];
    const std::string bat = absl::StrCat(at, ".buckets_ms[", i, "]");
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number() ||
        !pair[1].is_number() || !std::isfinite(pair[0].get<double>()) ||
        !std::isfinite(pair[1].get<double>()) || pair[1].get<double>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(bat, ": must be [le, count], finite numbers"));
    }
    const double le = pair[0].get<double>() / 1000;
    const uint64_t n =
        static_cast<uint64_t>(std::min(pair[1].get<double>(), 1e18));
    if ((!l.bounds_seconds.empty() &&
         (le <= l.bounds_seconds.back() || n < l.counts.back())) ||
        n > l.count) {
      return absl::InvalidArgumentError(
          absl::StrCat(bat,
                       ": bounds must increase and cumulative counts must not "
                       "decrease nor exceed count"));
    }
    l.bounds_seconds.push_back(le);
    l.counts.push_back(n);
  }
  *out = std::move(l);
  return absl::OkStatus();
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
        auto sv = v.find("state");
        if (sv != v.end() && !sv->is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(spath, ".state: must be a string"));
        }
        const std::string state = sv != v.end() ? sv->get<std::string>() : "";
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
    if (absl::Status e = ReadLatency(s, path, &st.latency); !e.ok()) return e;
    if (auto e = s.find("error"); e != s.end()) {
      if (!e->is_string() || e->get_ref<const std::string&>().size() > 1000) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ".error: must be a string of at most 1000 bytes"));
      }
      st.error = e->get<std::string>();
    }
    out[*name] = std::move(st);
  }
  return out;
}

}  // namespace loom
