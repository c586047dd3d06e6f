// Fuzzes `TokenRegistry::Authenticate` (src/loom/server/auth.h), which reads
// the `Authorization` header of every API request before any handler runs.
// The registry, over a memory store, holds an admin token, a user token, a
// one-time join token already used to join node `h200-0` (so the node has a
// credential), a revoked token and an expired one; job tokens derive from the
// cluster's secret key, and run 0 of jobs 1 to 9 is live (other runs and jobs
// are not).
//
// Secrets are random in each process, so an input names them by placeholder,
// replaced before the header is checked: `{admin}`, `{user}`, `{join}`,
// `{node}`, `{revoked}`, `{expired}` (a whole token, "loom.<id>.<secret>"),
// `{id:NAME}` and `{secret:NAME}` (its parts), `{job:N}` (the token of run 0
// of job N), `{job:N:R}` (of run R) and `{mac:N}`, `{mac:N:R}` (its HMAC part).
// Mutations of the text around them probe tokens that are nearly right.
//
// Checks: never an exception; an error is Unauthenticated (Unavailable only
// if the store fails, which a memory store does not) and never repeats the
// secret presented nor any real secret; a success is the principal of a live
// token made here, for a header that carries that token's exact secret (or
// the exact token of a live run of a job).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "fuzz/fuzz_check.h"
#include "loom/server/auth.h"
#include "loom/store/memory_state_store.h"

namespace loom {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1700000000);
// When headers are checked: the expired token's hour is over.
const absl::Time kNow = kStart + absl::Hours(2);

struct Made {
  std::string token;  // "loom.<id>.<secret>"
  std::string id;
  std::string secret;
  TokenRecord record;
  bool live = true;  // Authenticate may accept it
};

class World {
 public:
  World()
      : registry_(&store_, /*authoritative=*/true,
                  TokenRegistry::NewSecretKey()) {
    Ok(registry_.Load(kStart));
    registry_.SetJobRunCheck([](int64_t job, int64_t run) {
      return LiveRun(job, run) ? absl::OkStatus()
                               : absl::FailedPreconditionError("ended");
    });
    absl::StatusOr<std::optional<std::string>> admin =
        registry_.BootstrapAdmin(kStart, "root");
    LOOM_FUZZ_CHECK(admin.ok() && admin->has_value(),
                    admin.status().ToString());
    Add("admin", **admin, true);
    Add("user", Create(Request(Role::kUser, "alice", {"search"})), true);
    TokenRequest join = Request(Role::kJoin, "", {});
    const std::string join_token = Create(join);
    absl::StatusOr<Principal> joiner =
        registry_.Authenticate("Bearer " + join_token, kStart);
    LOOM_FUZZ_CHECK(joiner.ok(), joiner.status().ToString());
    absl::StatusOr<JoinedNode> node =
        registry_.JoinNode(*joiner, "h200-0", kStart);
    LOOM_FUZZ_CHECK(node.ok(), node.status().ToString());
    Add("join", join_token, false);  // used up
    Add("node", node->credential, true);
    const std::string revoked = Create(Request(Role::kUser, "bob", {}));
    Add("revoked", revoked, false);
    absl::StatusOr<TokenRecord> r =
        registry_.Revoke(made_["revoked"].id, kStart);
    LOOM_FUZZ_CHECK(r.ok(), r.status().ToString());
    TokenRequest expiring = Request(Role::kOperator, "carol", {});
    expiring.ttl = absl::Hours(1);
    Add("expired", Create(expiring), false);
    // The setup is what the checks assume.
    for (const auto& [name, m] : made_) {
      absl::StatusOr<Principal> p =
          registry_.Authenticate("Bearer " + m.token, kNow);
      LOOM_FUZZ_CHECK(p.ok() == m.live,
                      absl::StrCat(name, ": ", p.status().ToString()));
    }
  }

  // Replaces the placeholders of `text`.
  std::string Expand(absl::string_view text) const {
    std::string out;
    while (!text.empty()) {
      const size_t open = text.find('{');
      const size_t close =
          open == absl::string_view::npos ? open : text.find('}', open);
      if (close == absl::string_view::npos) break;
      absl::StrAppend(&out, text.substr(0, open));
      absl::StrAppend(&out, Resolve(text.substr(open + 1, close - open - 1),
                                    text.substr(open, close - open + 1)));
      text.remove_prefix(close + 1);
    }
    absl::StrAppend(&out, text);
    return out;
  }

  void Check(absl::string_view header) const {
    absl::StatusOr<Principal> p = registry_.Authenticate(
        std::string_view(header.data(), header.size()), kNow);
    if (!p.ok()) {
      fuzz::CheckErrorCode(p.status(), {absl::StatusCode::kUnauthenticated},
                           "Authenticate: an error that is not "
                           "Unauthenticated");
      const absl::string_view message = p.status().message();
      for (const auto& [name, m] : made_) {
        LOOM_FUZZ_CHECK(!absl::StrContains(message, m.secret),
                        absl::StrCat("the error repeats the secret of ", name,
                                     ": ", message));
      }
      // A secret-looking last part of the header (hex, long).
      const absl::string_view presented = SecretPart(header);
      if (presented.size() >= 20 &&
          std::all_of(presented.begin(), presented.end(), [](char c) {
            return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f');
          })) {
        LOOM_FUZZ_CHECK(!absl::StrContains(message, presented),
                        absl::StrCat("the error repeats the token: ", message));
      }
      return;
    }
    // A success: the header must carry a live token's exact secret.
    const std::vector<absl::string_view> parts = TokenParts(header);
    if (p->role == Role::kJob) {
      const std::string token = registry_.JobToken(p->job, p->run);
      LOOM_FUZZ_CHECK(LiveRun(p->job, p->run) && parts.size() == 4 &&
                          parts[0] == "loomjob" &&
                          parts[1] == absl::StrCat(p->job) &&
                          parts[2] == absl::StrCat(p->run) &&
                          parts[3] == token.substr(token.rfind('.') + 1),
                      absl::StrCat("accepted as job ", p->job, " run ", p->run,
                                   ": ", header));
      return;
    }
    LOOM_FUZZ_CHECK(parts.size() == 3, absl::StrCat("accepted: ", header));
    for (const auto& [name, m] : made_) {
      if (m.id != p->token_id) continue;
      LOOM_FUZZ_CHECK(m.live, absl::StrCat("accepted the ", name,
                                           " token, which must not pass"));
      LOOM_FUZZ_CHECK(
          parts[0] == "loom" && parts[1] == m.id && parts[2] == m.secret,
          absl::StrCat("accepted as ", name, ": ", header));
      LOOM_FUZZ_CHECK(p->role == m.record.role && p->user == m.record.user,
                      absl::StrCat("wrong principal for ", name));
      return;
    }
    fuzz::Fail("accepted a token that was never made", std::string(header));
  }

 private:
  static bool LiveRun(int64_t job, int64_t run) {
    return job >= 1 && job <= 9 && run == 0;
  }

  static void Ok(const absl::Status& st) {
    LOOM_FUZZ_CHECK(st.ok(), st.ToString());
  }

  static TokenRequest Request(Role role, const std::string& user,
                              std::vector<std::string> projects) {
    TokenRequest r;
    r.role = role;
    r.user = user;
    r.projects = std::move(projects);
    return r;
  }

  std::string Create(const TokenRequest& request) {
    absl::StatusOr<std::pair<TokenRecord, std::string>> t =
        registry_.Create(request, kStart);
    LOOM_FUZZ_CHECK(t.ok(), t.status().ToString());
    return t->second;
  }

  void Add(const std::string& name, const std::string& token, bool live) {
    std::vector<std::string> parts = absl::StrSplit(token, '.');
    LOOM_FUZZ_CHECK(parts.size() == 3, token);
    Made m;
    m.token = token;
    m.id = parts[1];
    m.secret = parts[2];
    m.live = live;
    for (const TokenRecord& r : registry_.List()) {
      if (r.id == m.id) m.record = r;
    }
    made_[name] = m;
  }

  std::string Resolve(absl::string_view name, absl::string_view as_is) const {
    auto find = [&](absl::string_view n) -> const Made* {
      auto it = made_.find(std::string(n));
      return it == made_.end() ? nullptr : &it->second;
    };
    if (const Made* m = find(name)) return m->token;
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(name, absl::MaxSplits(':', 1));
    if (const Made* m = find(kv.second)) {
      if (kv.first == "id") return m->id;
      if (kv.first == "secret") return m->secret;
    }
    int64_t job = 0, run = 0;
    std::pair<absl::string_view, absl::string_view> job_run =
        absl::StrSplit(kv.second, absl::MaxSplits(':', 1));
    if ((kv.first == "job" || kv.first == "mac") &&
        absl::SimpleAtoi(job_run.first, &job) &&
        (job_run.second.empty() || absl::SimpleAtoi(job_run.second, &run))) {
      const std::string token = registry_.JobToken(job, run);
      return kv.first == "job" ? token : token.substr(token.rfind('.') + 1);
    }
    return std::string(as_is);
  }

  // The token of a header, split at its dots, as `Authenticate` reads it.
  static std::vector<absl::string_view> TokenParts(absl::string_view header) {
    if (header.size() < 7 ||
        !absl::EqualsIgnoreCase(header.substr(0, 7), "bearer ")) {
      return {};
    }
    header.remove_prefix(7);
    while (!header.empty() && header.front() == ' ') header.remove_prefix(1);
    return absl::StrSplit(header, '.');
  }

  static absl::string_view SecretPart(absl::string_view header) {
    const size_t dot = header.rfind('.');
    return dot == absl::string_view::npos ? absl::string_view()
                                          : header.substr(dot + 1);
  }

  MemoryStateStore store_;
  TokenRegistry registry_;
  std::map<std::string, Made> made_;
};

}  // namespace
}  // namespace loom

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const loom::World* world = new loom::World();
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  world->Check(world->Expand(text));
  return 0;
}
