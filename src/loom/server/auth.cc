#include "loom/server/auth.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "loom/core/job_spec.h"

namespace loom {
namespace {

constexpr char kTokenPrefix[] = "/auth/tokens/";
// The longest decimal number a job id or run may have (int64).
constexpr size_t kMaxDecimalDigits = 18;

bool IsHex(std::string_view s, size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// A canonical decimal number: digits only, no sign, no leading zero (but
// "0" itself), at most 18 digits. So "02", "+2", " 2" and "2 " are not 2.
bool ParseCanonical(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > kMaxDecimalDigits ||
      (s.size() > 1 && s[0] == '0') ||
      !std::all_of(s.begin(), s.end(),
                   [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  int64_t v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  *out = v;
  return true;
}

bool Contains(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

absl::Status Invalid() {
  // Never says which part was wrong, and never repeats the token.
  return absl::UnauthenticatedError(
      "invalid token (send Authorization: Bearer <token>; an admin makes "
      "tokens with `loom token create`)");
}

}  // namespace

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kAdmin:
      return "admin";
    case Role::kOperator:
      return "operator";
    case Role::kUser:
      return "user";
    case Role::kNode:
      return "node";
    case Role::kJoin:
      return "join";
    case Role::kJob:
      return "job";
  }
  return "user";
}

absl::StatusOr<Role> ParseRole(std::string_view name) {
  for (Role r : {Role::kAdmin, Role::kOperator, Role::kUser, Role::kNode,
                 Role::kJoin, Role::kJob}) {
    if (RoleName(r) == name) return r;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("role: '", std::string(name),
                   "' is not one of admin, operator, user, join"));
}

bool Principal::InProject(const std::string& project) const {
  return std::find(projects.begin(), projects.end(), project) !=
             projects.end() ||
         std::find(projects.begin(), projects.end(), "*") != projects.end();
}

nlohmann::json TokenRecordToJson(const TokenRecord& t, bool with_hash) {
  nlohmann::json j = {{"id", t.id},
                      {"role", std::string(RoleName(t.role))},
                      {"user", t.user},
                      {"projects", t.projects},
                      {"created", absl::ToUnixSeconds(t.created)},
                      {"once", t.once},
                      {"used", t.used},
                      {"revoked", t.revoked},
                      {"description", t.description}};
  if (t.role == Role::kJoin) {
    j["nodes"] = t.nodes;
    j["joined"] = t.joined;
  }
  j["expires"] = t.expires ? nlohmann::json(absl::ToUnixSeconds(*t.expires))
                           : nlohmann::json(nullptr);
  if (with_hash) j["sha256"] = t.secret_sha256;
  return j;
}

absl::StatusOr<TokenRecord> TokenRecordFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return absl::DataLossError("token record: not an object");
  TokenRecord t;
  try {
    t.id = j.at("id").get<std::string>();
    absl::StatusOr<Role> role = ParseRole(j.at("role").get<std::string>());
    if (!role.ok()) return absl::DataLossError("token record: bad role");
    t.role = *role;
    t.user = j.value("user", "");
    t.projects = j.value("projects", std::vector<std::string>{});
    t.secret_sha256 = j.at("sha256").get<std::string>();
    t.created = absl::FromUnixSeconds(j.value("created", int64_t{0}));
    if (j.contains("expires") && j["expires"].is_number()) {
      t.expires = absl::FromUnixSeconds(j["expires"].get<int64_t>());
    }
    t.once = j.value("once", false);
    t.used = j.value("used", false);
    t.revoked = j.value("revoked", false);
    t.nodes = j.value("nodes", std::vector<std::string>{});
    t.joined = j.value("joined", std::vector<std::string>{});
    t.description = j.value("description", "");
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("token record: ", e.what()));
  }
  return t;
}

std::string TokenRegistry::NewSecretKey() { return RandomHex(32); }

void TokenRegistry::SetJobRunCheck(JobRunCheck check) {
  absl::MutexLock lock(&mu_);
  job_run_check_ = std::move(check);
}

absl::Status TokenRegistry::LoadFrom(absl::Time now, bool load_tokens) {
  if (!IsHex(secret_key_, 64)) {
    return absl::FailedPreconditionError(
        "the cluster's secret key is not 64 hex digits");
  }
  std::map<std::string, TokenRecord> tokens;
  if (load_tokens) {
    absl::StatusOr<std::vector<KeyValue>> all = store_->List(kTokenPrefix);
    if (!all.ok()) return all.status();
    for (const KeyValue& kv : *all) {
      nlohmann::json j = nlohmann::json::parse(kv.value, nullptr, false);
      absl::StatusOr<TokenRecord> t = TokenRecordFromJson(j);
      if (!t.ok()) {
        return absl::DataLossError(
            absl::StrCat("store entry ", kv.key, ": ", t.status().message()));
      }
      tokens[t->id] = *std::move(t);
    }
  }
  absl::MutexLock lock(&mu_);
  tokens_ = std::move(tokens);
  return absl::OkStatus();
}

absl::Status TokenRegistry::BecomeAuthoritative(absl::Time now) {
  if (absl::Status st = LoadFrom(now, /*tokens=*/true); !st.ok()) return st;
  authoritative_ = true;
  return absl::OkStatus();
}

absl::Status TokenRegistry::Load(absl::Time now) {
  return LoadFrom(now, authoritative_);
}

absl::Status TokenRegistry::Save(const TokenRecord& t) {
  absl::StatusOr<int64_t> r = store_->Commit(
      {}, {Mutation::Put(absl::StrCat(kTokenPrefix, t.id),
                         TokenRecordToJson(t, /*with_hash=*/true).dump())});
  if (!r.ok()) return r.status();
  if (authoritative_) {
    absl::MutexLock lock(&mu_);
    tokens_[t.id] = t;
  }
  return absl::OkStatus();
}

absl::StatusOr<TokenRecord> TokenRegistry::Find(const std::string& id) const {
  if (authoritative_) {
    absl::MutexLock lock(&mu_);
    auto it = tokens_.find(id);
    if (it == tokens_.end()) return absl::NotFoundError("no such token");
    return it->second;
  }
  absl::StatusOr<KeyValue> kv = store_->Get(absl::StrCat(kTokenPrefix, id));
  if (!kv.ok()) return kv.status();
  return TokenRecordFromJson(nlohmann::json::parse(kv->value, nullptr, false));
}

absl::StatusOr<std::optional<std::string>> TokenRegistry::BootstrapAdmin(
    absl::Time now, const std::string& user) {
  for (const TokenRecord& t : List()) {
    if (t.role == Role::kAdmin && !t.revoked) return std::nullopt;
  }
  TokenRequest req;
  req.role = Role::kAdmin;
  req.user = user;
  req.projects = {"*"};
  req.description = "made by `loom server` at its first start";
  absl::StatusOr<std::pair<TokenRecord, std::string>> made = Create(req, now);
  if (!made.ok()) return made.status();
  return made->second;
}

absl::StatusOr<std::pair<TokenRecord, std::string>> TokenRegistry::Create(
    const TokenRequest& request, absl::Time now) {
  if (request.role == Role::kJob) {
    return absl::InvalidArgumentError("role: job tokens are not made by hand");
  }
  if (request.role != Role::kJoin && request.user.empty()) {
    return absl::InvalidArgumentError("user: required");
  }
  if (request.role == Role::kNode) {
    // A node credential's user is a node name (from the cluster spec).
    if (!IsValidProjectName(request.user)) {
      return absl::InvalidArgumentError("user: not a valid node name");
    }
  } else if (!request.user.empty() && !IsValidUserName(request.user)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "user: not a valid user name (1 to ", kMaxUserNameLength,
        " letters, digits, '_', '.', '-', '@', starting with a letter, digit "
        "or '_', not digits only)"));
  }
  for (const std::string& p : request.projects) {
    if (p != "*" && !IsValidProjectName(p)) {
      return absl::InvalidArgumentError(
          "projects: each must be a project name (1 to 128 characters, no "
          "spaces or control characters) or *");
    }
  }
  if (request.role != Role::kJoin &&
      (request.reusable || !request.nodes.empty())) {
    return absl::InvalidArgumentError(
        "nodes: only a join token is reusable or bound to nodes");
  }
  if (request.ttl < absl::ZeroDuration() ||
      (request.ttl > absl::ZeroDuration() && request.ttl < absl::Seconds(1))) {
    return absl::InvalidArgumentError(
        "ttl_seconds: 0 (no expiry) or at least 1 second");
  }
  TokenRecord t;
  t.id = RandomHex(8);
  t.role = request.role;
  t.user = request.role == Role::kJoin ? "" : request.user;
  t.projects = request.projects;
  t.created = now;
  if (request.ttl > absl::ZeroDuration()) t.expires = now + request.ttl;
  t.once = request.role == Role::kJoin && !request.reusable;
  if (request.role == Role::kJoin) t.nodes = request.nodes;
  t.description = request.description;
  const std::string secret = RandomHex(32);
  t.secret_sha256 = Sha256Hex(secret);
  if (absl::Status st = Save(t); !st.ok()) return st;
  return std::make_pair(t, absl::StrCat("loom.", t.id, ".", secret));
}

absl::StatusOr<TokenRecord> TokenRegistry::Revoke(const std::string& id,
                                                  absl::Time now) {
  absl::StatusOr<TokenRecord> t = Find(id);
  if (!t.ok()) return absl::NotFoundError(absl::StrCat("no token ", id));
  t->revoked = true;
  if (absl::Status st = Save(*t); !st.ok()) return st;
  return *t;
}

absl::Status TokenRegistry::RevokeNode(const std::string& node,
                                       absl::Time now) {
  int revoked = 0;
  for (const TokenRecord& t : List()) {
    if (t.role == Role::kNode && t.user == node && !t.revoked) {
      if (absl::StatusOr<TokenRecord> r = Revoke(t.id, now); !r.ok()) {
        return r.status();
      }
      ++revoked;
    }
  }
  if (revoked == 0) {
    return absl::NotFoundError(
        absl::StrCat("node ", node, " has no credential to revoke"));
  }
  return absl::OkStatus();
}

std::vector<TokenRecord> TokenRegistry::List() const {
  std::vector<TokenRecord> out;
  if (authoritative_) {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, t] : tokens_) out.push_back(t);
    return out;
  }
  absl::StatusOr<std::vector<KeyValue>> all = store_->List(kTokenPrefix);
  if (!all.ok()) return out;
  for (const KeyValue& kv : *all) {
    absl::StatusOr<TokenRecord> t =
        TokenRecordFromJson(nlohmann::json::parse(kv.value, nullptr, false));
    if (t.ok()) out.push_back(*std::move(t));
  }
  return out;
}

absl::StatusOr<Principal> TokenRegistry::Authenticate(
    std::string_view authorization, absl::Time now) const {
  absl::string_view token(authorization.data(), authorization.size());
  if (token.size() < 7 ||
      !absl::EqualsIgnoreCase(token.substr(0, 7), "bearer ")) {
    return absl::UnauthenticatedError(
        "authentication required: send Authorization: Bearer <token> (the "
        "CLI reads it from LOOM_TOKEN or --token-file)");
  }
  token.remove_prefix(7);
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  std::vector<absl::string_view> parts = absl::StrSplit(token, '.');
  if (parts.size() != 3 && !(parts.size() == 4 && parts[0] == "loomjob")) {
    return Invalid();
  }
  if (parts[0] == "loomjob") {
    // "loomjob.<job>.<run>.<mac>": canonical numbers only, so that one job
    // and run have exactly one token.
    int64_t job = 0, run = 0;
    if (parts.size() != 4 ||
        !ParseCanonical(std::string_view(parts[1].data(), parts[1].size()),
                        &job) ||
        job <= 0 ||
        !ParseCanonical(std::string_view(parts[2].data(), parts[2].size()),
                        &run)) {
      return Invalid();
    }
    const std::string want = JobToken(job, run);
    if (!SecureEquals(std::string_view(parts[3].data(), parts[3].size()),
                      std::string_view(want).substr(want.rfind('.') + 1))) {
      return Invalid();
    }
    JobRunCheck check;
    {
      absl::MutexLock lock(&mu_);
      check = job_run_check_;
    }
    if (!check) {
      return absl::UnauthenticatedError(
          "job tokens are not accepted by this server");
    }
    if (absl::Status st = check(job, run); !st.ok()) {
      if (st.code() == absl::StatusCode::kUnavailable) return st;
      return absl::UnauthenticatedError(
          absl::StrCat("the token of job ", job, " run ", run,
                       " is no longer valid: ", st.message()));
    }
    Principal p;
    p.role = Role::kJob;
    p.job = job;
    p.run = run;
    p.token_id = absl::StrCat("job-", job, ".", run);
    return p;
  }
  if (parts[0] != "loom" ||
      !IsHex(std::string_view(parts[1].data(), parts[1].size()), 16) ||
      !IsHex(std::string_view(parts[2].data(), parts[2].size()), 64)) {
    return Invalid();
  }
  absl::StatusOr<TokenRecord> t = Find(std::string(parts[1]));
  if (!t.ok()) {
    if (t.status().code() == absl::StatusCode::kNotFound) return Invalid();
    return absl::UnavailableError(
        absl::StrCat("cannot check the token: ", t.status().message()));
  }
  if (!SecureEquals(
          Sha256Hex(std::string_view(parts[2].data(), parts[2].size())),
          t->secret_sha256)) {
    return Invalid();
  }
  if (t->revoked) {
    return absl::UnauthenticatedError(
        absl::StrCat("token ", t->id, " was revoked"));
  }
  if (t->expires && now >= *t->expires) {
    return absl::UnauthenticatedError(
        absl::StrCat("token ", t->id, " has expired"));
  }
  if (t->once && t->used) {
    return absl::UnauthenticatedError(
        absl::StrCat("join token ", t->id, " was already used"));
  }
  Principal p;
  p.token_id = t->id;
  p.user = t->user;
  p.role = t->role;
  p.projects = t->projects;
  return p;
}

std::optional<TokenRecord> TokenRegistry::LiveCredential(
    const std::string& node) const {
  std::optional<TokenRecord> live;
  auto consider = [&](const TokenRecord& t) {
    if (t.role == Role::kNode && t.user == node && !t.revoked &&
        (!live || t.created > live->created)) {
      live = t;
    }
  };
  if (authoritative_) {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, t] : tokens_) consider(t);
  } else {
    for (const TokenRecord& t : List()) consider(t);
  }
  return live;
}

absl::StatusOr<JoinedNode> TokenRegistry::JoinNode(const Principal& join,
                                                   const std::string& node,
                                                   absl::Time now) {
  if (join.role != Role::kJoin) {
    return absl::PermissionDeniedError("only a join token can join a node");
  }
  absl::MutexLock serial(&join_mu_);
  absl::StatusOr<TokenRecord> jt = Find(join.token_id);
  if (!jt.ok()) return Invalid();
  // Checked again here: another join may have used it up in between.
  if (jt->revoked || (jt->expires && now >= *jt->expires) ||
      (jt->once && jt->used)) {
    return absl::UnauthenticatedError(
        absl::StrCat("join token ", jt->id, " is revoked, expired or used up"));
  }
  if (!jt->nodes.empty() && !Contains(jt->nodes, node)) {
    return absl::PermissionDeniedError(
        absl::StrCat("join token ", jt->id, " may join only ",
                     absl::StrJoin(jt->nodes, ", "), ", not ", node));
  }
  if (jt->once && !jt->nodes.empty() && Contains(jt->joined, node)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "join token ", jt->id, " has already joined ", node, " once"));
  }
  if (std::optional<TokenRecord> live = LiveCredential(node)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", node, " already has a live credential (token ", live->id,
        "): a join token cannot take over a node that has joined; if its "
        "agent lost its credential (a reinstall), an admin first revokes the "
        "old one with `loom token revoke --node ",
        node, "`, then the node joins again"));
  }
  if (!Contains(jt->joined, node)) jt->joined.push_back(node);
  if (jt->once) {
    jt->used =
        jt->nodes.empty() || std::all_of(jt->nodes.begin(), jt->nodes.end(),
                                         [&](const std::string& n) {
                                           return Contains(jt->joined, n);
                                         });
  }
  if (absl::Status st = Save(*jt); !st.ok()) return st;
  TokenRequest req;
  req.role = Role::kNode;
  req.user = node;
  req.description = absl::StrCat("credential of node ", node,
                                 ", joined with token ", join.token_id);
  absl::StatusOr<std::pair<TokenRecord, std::string>> made = Create(req, now);
  if (!made.ok()) return made.status();
  return JoinedNode{made->second, made->first.id};
}

absl::Status TokenRegistry::UndoJoin(const Principal& join,
                                     const std::string& node,
                                     const JoinedNode& joined, absl::Time now) {
  absl::MutexLock serial(&join_mu_);
  if (absl::StatusOr<TokenRecord> r = Revoke(joined.credential_id, now);
      !r.ok()) {
    return r.status();
  }
  absl::StatusOr<TokenRecord> jt = Find(join.token_id);
  if (!jt.ok()) return jt.status();
  jt->joined.erase(std::remove(jt->joined.begin(), jt->joined.end(), node),
                   jt->joined.end());
  jt->used = false;
  return Save(*jt);
}

std::string TokenRegistry::JobToken(int64_t job, int64_t run) const {
  return absl::StrCat(
      "loomjob.", job, ".", run, ".",
      HmacSha256Hex(secret_key_, absl::StrCat("job:", job, ":", run)));
}

std::string TokenRegistry::AgentKey(const std::string& node) const {
  std::optional<TokenRecord> live = LiveCredential(node);
  if (!live) return "";
  return HmacSha256Hex(secret_key_,
                       absl::StrCat("agent:", node, ":", live->id));
}

}  // namespace loom
