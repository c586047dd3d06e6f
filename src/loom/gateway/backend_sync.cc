#include "loom/gateway/backend_sync.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace loom::gateway {
namespace {

using Kind = SyncAction::Kind;

bool Idle(const ObservedServer& s) { return s.sessions == 0 && s.queued == 0; }

// The steps that take `s` out; true when it is gone after them (so that a
// replacement may be added in the same pass).
bool Retire(const ObservedServer& s, std::vector<SyncAction>* drains,
            std::vector<SyncAction>* removals,
            std::vector<std::string>* waiting) {
  if (s.admin == ServerAdminState::kReady) {
    drains->push_back({Kind::kDrain, s.name, ""});
    return false;
  }
  if (!Idle(s)) {
    waiting->push_back(s.name);
    return false;
  }
  if (s.admin != ServerAdminState::kMaint) {
    removals->push_back({Kind::kMaint, s.name, ""});
  }
  removals->push_back({Kind::kDelete, s.name, ""});
  return true;
}

}  // namespace

std::string DescribeAction(const SyncAction& a) {
  switch (a.kind) {
    case Kind::kAdd:
      return absl::StrCat("add ", a.server, " ", a.address);
    case Kind::kReady:
      return absl::StrCat("ready ", a.server);
    case Kind::kDrain:
      return absl::StrCat("drain ", a.server);
    case Kind::kMaint:
      return absl::StrCat("maint ", a.server);
    case Kind::kDelete:
      return absl::StrCat("delete ", a.server);
  }
  return a.server;
}

BackendDiff DiffBackend(const DesiredBackend& desired,
                        const std::vector<ObservedServer>& observed) {
  BackendDiff diff;
  std::map<std::string, const ObservedServer*> have;
  for (const ObservedServer& s : observed) have.emplace(s.name, &s);
  std::vector<SyncAction> adds, drains, removals;
  for (const auto& [name, want] : desired) {
    if (auto s = ValidateServerName(name); !s.ok()) {
      diff.rejected.push_back(std::string(s.message()));
      continue;
    }
    absl::StatusOr<ServerAddress> addr = ParseServerAddress(want.address);
    if (!addr.ok()) {
      diff.rejected.push_back(
          absl::StrCat("server ", name, ": ", addr.status().message()));
      continue;
    }
    const std::string address = FormatServerAddress(*addr);
    auto it = have.find(name);
    if (it == have.end()) {
      if (want.serving) adds.push_back({Kind::kAdd, name, address});
      continue;
    }
    const ObservedServer& cur = *it->second;
    if (!want.serving) {
      Retire(cur, &drains, &removals, &diff.waiting);
    } else if (cur.address != address) {
      // Same name, new place: out with the old, then in with the new.
      if (Retire(cur, &drains, &removals, &diff.waiting)) {
        removals.push_back({Kind::kAdd, name, address});
      }
    } else if (cur.admin != ServerAdminState::kReady) {
      adds.push_back({Kind::kReady, name, ""});
    }
  }
  // Servers nobody wants (left from before a restart): retire them too.
  std::vector<const ObservedServer*> strays;
  for (const auto& [name, s] : have) {
    if (!desired.count(name)) strays.push_back(s);
  }
  for (const ObservedServer* s : strays) {
    Retire(*s, &drains, &removals, &diff.waiting);
  }
  // `desired` and `have` are maps, but strays come after the wanted ones:
  // put each group in name order (stable, so a replacement's delete stays
  // before its add).
  auto by_name = [](const SyncAction& a, const SyncAction& b) {
    return a.server < b.server;
  };
  std::stable_sort(drains.begin(), drains.end(), by_name);
  std::stable_sort(removals.begin(), removals.end(), by_name);
  std::sort(diff.waiting.begin(), diff.waiting.end());
  for (auto* group : {&adds, &drains, &removals}) {
    diff.actions.insert(diff.actions.end(), group->begin(), group->end());
  }
  return diff;
}

std::map<std::string, std::vector<ObservedServer>> MergeObservation(
    const std::vector<ServerStateRow>& states,
    const std::vector<StatRow>& stats) {
  std::map<std::pair<std::string, std::string>, const StatRow*> by_name;
  for (const StatRow& r : stats) {
    if (r.type == StatRow::Type::kServer) {
      by_name.emplace(std::pair{r.proxy, r.name}, &r);
    }
  }
  std::map<std::string, std::vector<ObservedServer>> out;
  for (const ServerStateRow& row : states) {
    ObservedServer s;
    s.name = row.server;
    s.address = row.address;
    s.admin = row.admin;
    auto it = by_name.find({row.backend, row.server});
    if (it != by_name.end()) {
      s.sessions = it->second->scur;
      s.queued = it->second->qcur;
    }
    out[row.backend].push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::vector<ObservedServer>>>
ObserveBackends(const HaproxyRuntime& runtime) {
  absl::StatusOr<std::vector<ServerStateRow>> states =
      runtime.ShowServersState();
  if (!states.ok()) return states.status();
  absl::StatusOr<std::vector<StatRow>> stats = runtime.ShowStat();
  if (!stats.ok()) return stats.status();
  return MergeObservation(*states, *stats);
}

absl::Status SyncReport::status() const {
  if (failed.empty()) return absl::OkStatus();
  const auto& [action, status] = failed.front();
  return absl::Status(
      status.code(),
      absl::StrCat(failed.size(), " of ", failed.size() + applied.size(),
                   " backend changes failed; first: ", DescribeAction(action),
                   ": ", status.message()));
}

SyncReport ApplyActions(const HaproxyRuntime& runtime, std::string_view backend,
                        const std::vector<SyncAction>& actions,
                        const ServerOptions& options) {
  SyncReport report;
  std::set<std::string> broken;
  for (const SyncAction& a : actions) {
    if (broken.count(a.server)) continue;
    absl::Status s;
    switch (a.kind) {
      case Kind::kAdd:
        s = runtime.AddServer(backend, a.server, a.address, options);
        break;
      case Kind::kReady:
        s = runtime.SetServerState(backend, a.server, ServerAdminState::kReady);
        break;
      case Kind::kDrain:
        s = runtime.SetServerState(backend, a.server, ServerAdminState::kDrain);
        break;
      case Kind::kMaint:
        s = runtime.SetServerState(backend, a.server, ServerAdminState::kMaint);
        break;
      case Kind::kDelete:
        s = runtime.DelServer(backend, a.server);
        break;
    }
    if (s.ok()) {
      report.applied.push_back(a);
    } else {
      broken.insert(a.server);
      report.failed.emplace_back(a, std::move(s));
    }
  }
  return report;
}

absl::StatusOr<SyncReport> SyncBackend(const HaproxyRuntime& runtime,
                                       std::string_view backend,
                                       const DesiredBackend& desired,
                                       const ServerOptions& options) {
  absl::StatusOr<std::map<std::string, std::vector<ObservedServer>>> seen =
      ObserveBackends(runtime);
  if (!seen.ok()) return seen.status();
  static const std::vector<ObservedServer> kNone;
  auto it = seen->find(std::string(backend));
  BackendDiff diff =
      DiffBackend(desired, it == seen->end() ? kNone : it->second);
  SyncReport report = ApplyActions(runtime, backend, diff.actions, options);
  report.waiting = std::move(diff.waiting);
  report.rejected = std::move(diff.rejected);
  return report;
}

}  // namespace loom::gateway
