#include "loom/store/etcd_state_store.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace loom {
namespace {

// etcd's revision of a store revision or version (see the class comment).
int64_t EtcdRevision(int64_t store_revision) { return store_revision + 1; }
int64_t StoreRevision(int64_t etcd_revision) {
  return etcd_revision > 0 ? etcd_revision - 1 : 0;
}

nlohmann::json RangeOp(const std::string& encoded_key) {
  return {{"requestRange", {{"key", encoded_key}}}};
}

// The mod revision of the single key a `response_range` holds; 0 if none.
int64_t RangeModRevision(const nlohmann::json& response) {
  auto r = response.find("response_range");
  if (r == response.end()) return 0;
  auto kvs = r->find("kvs");
  if (kvs == r->end() || !kvs->is_array() || kvs->empty()) return 0;
  return EtcdClient::Int((*kvs)[0], "mod_revision");
}

int64_t RangeCreateRevision(const nlohmann::json& response) {
  auto r = response.find("response_range");
  if (r == response.end()) return 0;
  auto kvs = r->find("kvs");
  if (kvs == r->end() || !kvs->is_array() || kvs->empty()) return 0;
  return EtcdClient::Int((*kvs)[0], "create_revision");
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdStateStore>> EtcdStateStore::Connect(
    EtcdStateStoreOptions options) {
  if (options.key_prefix.empty()) {
    return absl::InvalidArgumentError(
        "etcd key prefix must not be empty (it keeps loom's keys apart)");
  }
  absl::StatusOr<std::unique_ptr<EtcdClient>> client =
      EtcdClient::Create(options.client);
  if (!client.ok()) return client.status();
  std::unique_ptr<EtcdStateStore> store(
      new EtcdStateStore(std::move(options), *std::move(client)));
  absl::StatusOr<int64_t> rev = store->Revision();
  if (!rev.ok()) return rev.status();
  return store;
}

EtcdStateStore::EtcdStateStore(EtcdStateStoreOptions options,
                               std::unique_ptr<EtcdClient> client)
    : options_(std::move(options)), client_(std::move(client)) {}

void EtcdStateStore::SetFence(
    std::string key, int64_t create_revision,
    std::function<void(const absl::Status&)> on_fenced) {
  absl::MutexLock lock(&mu_);
  fence_key_ = std::move(key);
  fence_revision_ = create_revision;
  on_fenced_ = std::move(on_fenced);
  fenced_ = false;
}

std::string EtcdStateStore::Full(std::string_view key) const {
  return absl::StrCat(options_.key_prefix, std::string(key));
}

absl::StatusOr<KeyValue> EtcdStateStore::FromKv(
    const nlohmann::json& kv) const {
  absl::StatusOr<std::string> key = EtcdClient::Decode(kv, "key");
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> value = EtcdClient::Decode(kv, "value");
  if (!value.ok()) return value.status();
  if (!HasPrefix(*key, options_.key_prefix)) {
    return absl::InternalError(
        absl::StrCat("etcd returned a key outside the store's prefix: ", *key));
  }
  KeyValue out;
  out.key = key->substr(options_.key_prefix.size());
  out.value = *std::move(value);
  out.version = StoreRevision(EtcdClient::Int(kv, "mod_revision"));
  return out;
}

absl::StatusOr<KeyValue> EtcdStateStore::Get(std::string_view key) {
  if (absl::Status st = ValidateKey(key); !st.ok()) return st;
  absl::StatusOr<nlohmann::json> r =
      client_->Call("/v3/kv/range", {{"key", EtcdClient::Encode(Full(key))}});
  if (!r.ok()) return r.status();
  auto kvs = r->find("kvs");
  if (kvs == r->end() || !kvs->is_array() || kvs->empty()) {
    return absl::NotFoundError(
        absl::StrCat("no key \"", std::string(key), "\""));
  }
  return FromKv((*kvs)[0]);
}

absl::StatusOr<std::vector<KeyValue>> EtcdStateStore::List(
    std::string_view prefix, int64_t limit) {
  if (absl::Status st = ValidatePrefix(prefix); !st.ok()) return st;
  if (limit < 0) return absl::InvalidArgumentError("negative limit");
  const std::string full = Full(prefix);
  nlohmann::json body = {{"key", EtcdClient::Encode(full)},
                         {"range_end", EtcdClient::Encode(PrefixEnd(full))}};
  if (limit > 0) body["limit"] = limit;
  absl::StatusOr<nlohmann::json> r = client_->Call("/v3/kv/range", body);
  if (!r.ok()) return r.status();
  std::vector<KeyValue> out;
  auto kvs = r->find("kvs");
  if (kvs == r->end() || !kvs->is_array()) return out;
  out.reserve(kvs->size());
  for (const nlohmann::json& kv : *kvs) {
    absl::StatusOr<KeyValue> one = FromKv(kv);
    if (!one.ok()) return one.status();
    out.push_back(*std::move(one));
  }
  return out;
}

absl::StatusOr<int64_t> EtcdStateStore::Commit(
    const std::vector<Condition>& conditions,
    const std::vector<Mutation>& mutations) {
  if (absl::Status st = ValidateCommit(conditions, mutations); !st.ok()) {
    return st;
  }
  nlohmann::json compare = nlohmann::json::array();
  nlohmann::json failure = nlohmann::json::array();
  std::string fence_key;
  int64_t fence_revision = 0;
  {
    absl::MutexLock lock(&mu_);
    fence_key = fence_key_;
    fence_revision = fence_revision_;
  }
  if (!fence_key.empty()) {
    const std::string k = EtcdClient::Encode(fence_key);
    compare.push_back(
        {{"target", "CREATE"}, {"key", k}, {"createRevision", fence_revision}});
    failure.push_back(RangeOp(k));
  }
  for (const Condition& c : conditions) {
    const std::string k = EtcdClient::Encode(Full(c.key));
    if (c.version == Condition::kMustNotExist) {
      compare.push_back({{"target", "VERSION"}, {"key", k}, {"version", 0}});
    } else if (c.version == Condition::kMustExist) {
      compare.push_back({{"target", "VERSION"},
                         {"key", k},
                         {"version", 0},
                         {"result", "GREATER"}});
    } else {
      compare.push_back({{"target", "MOD"},
                         {"key", k},
                         {"modRevision", EtcdRevision(c.version)}});
    }
    failure.push_back(RangeOp(k));
  }
  nlohmann::json success = nlohmann::json::array();
  for (const Mutation& m : mutations) {
    const std::string k = EtcdClient::Encode(Full(m.key));
    if (m.kind == Mutation::kPut) {
      success.push_back(
          {{"requestPut",
            {{"key", k}, {"value", EtcdClient::Encode(m.value)}}}});
    } else {
      success.push_back({{"requestDeleteRange", {{"key", k}}}});
    }
  }
  absl::StatusOr<nlohmann::json> r = client_->Call(
      "/v3/kv/txn",
      {{"compare", compare}, {"success", success}, {"failure", failure}});
  if (!r.ok()) return r.status();
  const int64_t revision =
      StoreRevision(EtcdClient::Int((*r)["header"], "revision"));
  if (r->value("succeeded", false)) return revision;

  // Which compare failed: the failure branch read every compared key.
  const nlohmann::json responses =
      r->contains("responses") ? (*r)["responses"] : nlohmann::json::array();
  if (!responses.is_array() || responses.size() != failure.size()) {
    return absl::InternalError("etcd txn failed without the expected reads");
  }
  size_t i = 0;
  if (!fence_key.empty()) {
    const int64_t actual = RangeCreateRevision(responses[i++]);
    if (actual != fence_revision) {
      absl::Status st = absl::FailedPreconditionError(absl::StrCat(
          "fenced: this server is no longer the leader (leader key \"",
          fence_key, "\" has create revision ", actual, ", this term's is ",
          fence_revision, ")"));
      std::function<void(const absl::Status&)> notify;
      {
        absl::MutexLock lock(&mu_);
        if (!fenced_) {
          fenced_ = true;
          notify = on_fenced_;
        }
      }
      if (notify) notify(st);
      return st;
    }
  }
  for (const Condition& c : conditions) {
    const int64_t actual = StoreRevision(RangeModRevision(responses[i++]));
    if (!ConditionHolds(c, actual)) return ConditionFailedError(c, actual);
  }
  return absl::InternalError(
      "etcd refused a commit whose conditions all hold now (raced with "
      "another writer); retry");
}

absl::StatusOr<int64_t> EtcdStateStore::Revision() {
  absl::StatusOr<nlohmann::json> r = client_->Call(
      "/v3/kv/range",
      {{"key", EtcdClient::Encode(options_.key_prefix)}, {"count_only", true}});
  if (!r.ok()) return r.status();
  return StoreRevision(EtcdClient::Int((*r)["header"], "revision"));
}

absl::StatusOr<std::vector<Change>> EtcdStateStore::ChangesSince(
    std::string_view prefix, int64_t revision, int64_t limit) {
  if (absl::Status st = ValidatePrefix(prefix); !st.ok()) return st;
  if (revision < 0) return absl::InvalidArgumentError("negative revision");
  if (limit < 0) return absl::InvalidArgumentError("negative limit");
  absl::StatusOr<int64_t> current = Revision();
  if (!current.ok()) return current.status();
  std::vector<Change> out;
  if (revision >= *current) return out;
  const int64_t target = EtcdRevision(*current);
  const std::string full = Full(prefix);
  // The whole key space: the last revision always has an event somewhere,
  // so the stream is known to be complete when it shows up.
  const std::string all = EtcdClient::Encode(std::string(1, '\0'));
  nlohmann::json body = {{"create_request",
                          {{"key", all},
                           {"range_end", all},
                           {"start_revision", EtcdRevision(revision) + 1}}}};
  int64_t stop_after = -1;  // limit reached: finish this revision
  bool compacted = false;
  absl::Status bad;
  absl::Status st = client_->Stream(
      "/v3/watch", body, absl::Now() + options_.watch_timeout,
      [&](const nlohmann::json& m) {
        const nlohmann::json& r = m.contains("result") ? m["result"] : m;
        if (r.value("canceled", false)) {
          if (EtcdClient::Int(r, "compact_revision") > 0)
            compacted = true;
          else
            bad = absl::UnavailableError(absl::StrCat(
                "etcd canceled the watch: ", r.value("cancel_reason", "")));
          return false;
        }
        auto events = r.find("events");
        if (events == r.end() || !events->is_array()) return true;
        bool done = false;
        for (const nlohmann::json& ev : *events) {
          const nlohmann::json& kv = ev.contains("kv") ? ev["kv"] : ev;
          const int64_t mod = EtcdClient::Int(kv, "mod_revision");
          if (stop_after >= 0 && mod > stop_after) return false;
          if (mod > target) return false;
          if (mod >= target) done = true;
          absl::StatusOr<std::string> key = EtcdClient::Decode(kv, "key");
          if (!key.ok()) {
            bad = key.status();
            return false;
          }
          if (!HasPrefix(*key, full)) continue;
          Change c;
          const bool is_delete = ev.contains("type") &&
                                 (ev["type"] == "DELETE" || ev["type"] == 1);
          c.kind = is_delete ? Mutation::kDelete : Mutation::kPut;
          c.key = key->substr(options_.key_prefix.size());
          if (!is_delete) {
            absl::StatusOr<std::string> value = EtcdClient::Decode(kv, "value");
            if (!value.ok()) {
              bad = value.status();
              return false;
            }
            c.value = *std::move(value);
          }
          c.revision = StoreRevision(mod);
          out.push_back(std::move(c));
          if (limit > 0 && stop_after < 0 &&
              static_cast<int64_t>(out.size()) >= limit) {
            stop_after = mod;
          }
        }
        return !done;
      });
  if (compacted) {
    return absl::OutOfRangeError(
        absl::StrCat("changes after revision ", revision,
                     " were compacted away in etcd; re-list"));
  }
  if (!bad.ok()) return bad;
  if (!st.ok()) return st;
  return out;
}

}  // namespace loom
