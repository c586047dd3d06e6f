#include "loom/store/etcd_leader_election.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace loom {

EtcdLeaderElection::EtcdLeaderElection(EtcdClient* client,
                                       EtcdLeaderElectionOptions options)
    : client_(client), options_(std::move(options)) {}

EtcdLeaderElection::~EtcdLeaderElection() { Resign(); }

std::string EtcdLeaderElection::Leader() const {
  absl::MutexLock lock(&mu_);
  return leader_;
}

absl::StatusOr<int64_t> EtcdLeaderElection::GrantLease() {
  const int64_t ttl = std::max<int64_t>(
      2, static_cast<int64_t>(
             std::ceil(absl::ToDoubleSeconds(options_.lease_ttl))));
  absl::StatusOr<nlohmann::json> r =
      client_->Call("/v3/lease/grant", {{"TTL", ttl}});
  if (!r.ok()) return r.status();
  const int64_t id = EtcdClient::Int(*r, "ID");
  if (id == 0) {
    return absl::UnavailableError(absl::StrCat(
        "etcd granted no lease: ", r->value("error", std::string("?"))));
  }
  return id;
}

absl::StatusOr<int64_t> EtcdLeaderElection::KeepAlive(int64_t lease) {
  absl::StatusOr<nlohmann::json> r =
      client_->Call("/v3/lease/keepalive", {{"ID", lease}});
  if (!r.ok()) return r.status();
  const nlohmann::json& result = r->contains("result") ? (*r)["result"] : *r;
  return EtcdClient::Int(result, "TTL");
}

absl::StatusOr<int64_t> EtcdLeaderElection::Campaign(
    const std::atomic<bool>& stop) {
  const std::string key = EtcdClient::Encode(options_.key);
  int64_t lease = 0;
  absl::Time renewed = absl::InfinitePast();
  while (!stop) {
    if (lease == 0) {
      absl::StatusOr<int64_t> granted = GrantLease();
      if (granted.ok()) {
        lease = *granted;
        renewed = absl::Now();
      }
    } else if (absl::Now() - renewed >= options_.lease_ttl / 3) {
      absl::StatusOr<int64_t> ttl = KeepAlive(lease);
      if (ttl.ok() && *ttl > 0) renewed = absl::Now();
      if (ttl.ok() && *ttl == 0) lease = 0;  // expired while we waited
    }
    if (lease != 0) {
      absl::StatusOr<nlohmann::json> r = client_->Call(
          "/v3/kv/txn",
          {{"compare",
            {{{"target", "CREATE"}, {"key", key}, {"createRevision", 0}}}},
           {"success",
            {{{"requestPut",
               {{"key", key},
                {"value", EtcdClient::Encode(options_.value)},
                {"lease", lease}}}}}},
           {"failure", {{{"requestRange", {{"key", key}}}}}}});
      if (r.ok() && r->value("succeeded", false)) {
        const int64_t term = EtcdClient::Int((*r)["header"], "revision");
        absl::MutexLock lock(&mu_);
        leader_ = options_.value;
        lease_ = lease;
        term_ = term;
        leading_ = true;
        return term;
      }
      if (r.ok()) {
        std::string leader;
        const nlohmann::json& responses = (*r)["responses"];
        if (responses.is_array() && !responses.empty()) {
          const nlohmann::json& range = responses[0]["response_range"];
          if (range.contains("kvs") && !range["kvs"].empty()) {
            leader = EtcdClient::Decode(range["kvs"][0], "value").value_or("");
          }
        }
        absl::MutexLock lock(&mu_);
        leader_ = leader;
      }
    }
    absl::SleepFor(options_.poll);
  }
  if (lease != 0) {
    (void)client_->Call("/v3/lease/revoke", {{"ID", lease}});
  }
  return absl::CancelledError("stopped before winning the election");
}

void EtcdLeaderElection::KeepLeading(
    std::function<void(const absl::Status&)> on_lost) {
  {
    absl::MutexLock lock(&mu_);
    on_lost_ = std::move(on_lost);
  }
  keeper_ = std::thread([this] { KeepLoop(); });
}

void EtcdLeaderElection::KeepLoop() {
  int64_t lease, term;
  {
    absl::MutexLock lock(&mu_);
    lease = lease_;
    term = term_;
  }
  const std::string key = EtcdClient::Encode(options_.key);
  absl::Time last_ok = absl::Now();
  absl::Status lost;
  while (!stop_) {
    {
      absl::MutexLock lock(&mu_);
      wake_.WaitWithTimeout(&mu_, options_.lease_ttl / 3);
    }
    if (stop_) return;
    absl::StatusOr<int64_t> ttl = KeepAlive(lease);
    if (ttl.ok() && *ttl > 0) {
      absl::StatusOr<nlohmann::json> r =
          client_->Call("/v3/kv/range", {{"key", key}});
      if (r.ok()) {
        int64_t created = 0;
        if (r->contains("kvs") && !(*r)["kvs"].empty()) {
          created = EtcdClient::Int((*r)["kvs"][0], "create_revision");
        }
        if (created != term) {
          lost = absl::AbortedError(
              absl::StrCat("the leader key ", options_.key,
                           " is no longer this server's (create revision ",
                           created, ", term ", term, ")"));
          break;
        }
      }
      last_ok = absl::Now();
    } else if (ttl.ok()) {
      lost = absl::AbortedError("the leader lease expired");
      break;
    } else if (absl::Now() - last_ok >= options_.lease_ttl) {
      lost = absl::UnavailableError(
          absl::StrCat("cannot renew the leader lease for ",
                       absl::FormatDuration(absl::Now() - last_ok), ": ",
                       ttl.status().message()));
      break;
    }
  }
  // `Resign` stopped the loop (perhaps while a renewal was in flight): a
  // handover, not a loss.
  if (stop_ && lost.ok()) return;
  leading_ = false;
  std::function<void(const absl::Status&)> notify;
  {
    absl::MutexLock lock(&mu_);
    notify = std::move(on_lost_);
    leader_.clear();
  }
  if (notify) notify(lost);
}

void EtcdLeaderElection::Resign() {
  stop_ = true;
  {
    absl::MutexLock lock(&mu_);
    wake_.SignalAll();
  }
  if (keeper_.joinable() && keeper_.get_id() != std::this_thread::get_id()) {
    keeper_.join();
  }
  int64_t lease;
  {
    absl::MutexLock lock(&mu_);
    lease = lease_;
    lease_ = 0;
  }
  if (leading_.exchange(false) && lease != 0) {
    (void)client_->Call("/v3/lease/revoke", {{"ID", lease}});
  }
}

}  // namespace loom
