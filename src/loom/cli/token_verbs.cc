#include "loom/cli/token_verbs.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "loom/cli/output_format.h"
#include "loom/cli/reply_fields.h"
#include "loom/cli/verb_flags.h"
#include "loom/client/api_client.h"
#include "loom/common/units.h"

namespace loom::cli {
namespace {

// The `loom whoami` line: "alice (user; token t-3; projects search,ads)".
std::string FormatWhoAmI(const Json& me) {
  return absl::StrCat(
      Cell(me, "user"), " (", Cell(me, "role"), "; token ", Cell(me, "token"),
      "; projects ",
      me.contains("projects") && !me["projects"].empty()
          ? absl::StrJoin(me["projects"].get<std::vector<std::string>>(), ",")
          : std::string("-"),
      ")\n");
}

// The `loom token list` table; a token past its expiry is "expired" at
// `now`.
std::string FormatTokenTable(const Json& tokens, absl::Time now) {
  std::vector<std::vector<std::string>> rows;
  for (const Json& t : Items(tokens, "tokens")) {
    std::string state = t.value("revoked", false) ? "revoked"
                        : t.value("used", false)  ? "used"
                                                  : "active";
    std::optional<int64_t> expires = Int(t, "expires");
    if (state == "active" && expires &&
        absl::FromUnixSeconds(*expires) <= now) {
      state = "expired";
    }
    std::string projects = "-";
    if (t.contains("projects") && t["projects"].is_array() &&
        !t["projects"].empty()) {
      projects =
          absl::StrJoin(t["projects"].get<std::vector<std::string>>(), ",");
    }
    rows.push_back(
        {Cell(t, "id"), Cell(t, "role"),
         t.value("user", std::string()).empty() ? "-" : Cell(t, "user"),
         projects, state,
         expires ? absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                                    absl::FromUnixSeconds(*expires),
                                    absl::UTCTimeZone())
                 : "-",
         t.value("description", std::string()).empty()
             ? "-"
             : Cell(t, "description")});
  }
  return FormatTable(
      {"ID", "ROLE", "USER", "PROJECTS", "STATE", "EXPIRES", "DESCRIPTION"},
      rows);
}

int WhoAmI(const Verb& v) {
  return RequestAndPrint(
      v, [](ApiClient& client) { return client.WhoAmI(); }, FormatWhoAmI);
}

int Token(const Verb& v) {
  const JobCommandFlags& f = v.flags;
  if (f.token_action == "list") {
    return RequestAndPrint(
        v, [](ApiClient& client) { return client.ListTokens(); },
        [&](const Json& tokens) {
          return FormatTokenTable(tokens, v.ctx.now());
        });
  }
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  if (f.token_action == "revoke") {
    if (!f.token_node.empty()) {
      absl::StatusOr<Json> r = client->RevokeNode(f.token_node);
      if (!r.ok()) return v.Fail(kExitFailed, r.status());
      v.out() << "revoked the credential of node " << f.token_node << "\n";
      return kExitOk;
    }
    if (f.token_id.empty()) {
      return v.Fail(kExitUsage, "token revoke: give a token ID or --node NAME");
    }
    absl::StatusOr<Json> r = client->RevokeToken(f.token_id);
    if (!r.ok()) return v.Fail(kExitFailed, r.status());
    v.out() << "revoked token " << f.token_id << "\n";
    return kExitOk;
  }
  if (f.token_action != "create") {
    return v.Fail(kExitUsage, absl::StrCat("token: '", f.token_action,
                                           "' is not create, list or revoke"));
  }
  Json request = {{"role", f.token_join ? std::string("join") : f.token_role},
                  {"description", f.token_description}};
  if (f.token_join) {
    // Single-use unless --reusable; --nodes binds it to those names.
    if (f.token_reusable) request["reusable"] = true;
    if (!f.token_nodes.empty()) request["nodes"] = f.token_nodes;
  } else {
    if (f.token_reusable || !f.token_nodes.empty()) {
      return v.Fail(kExitUsage, "--reusable and --nodes go with --join");
    }
    request["user"] = f.token_user;
    request["projects"] = f.token_projects;
  }
  if (!f.token_ttl.empty()) {
    absl::StatusOr<absl::Duration> ttl = ParseDuration(f.token_ttl);
    if (!ttl.ok()) {
      return v.Fail(kExitUsage,
                    absl::StrCat("--ttl: ", ttl.status().message()));
    }
    request["ttl_seconds"] = absl::ToDoubleSeconds(*ttl);
  }
  absl::StatusOr<Json> made = client->CreateToken(request);
  if (!made.ok()) return v.Fail(kExitFailed, made.status());
  if (v.PrintStructured(*made)) return kExitOk;
  // The token alone on stdout (for `> file` and $(...)); the rest on stderr.
  v.out() << Str(*made, "token") << "\n";
  v.err() << "token " << Cell(*made, "id") << " (" << Cell(*made, "role")
          << (f.token_join ? "" : absl::StrCat(" ", f.token_user))
          << "): shown only now; keep it secret\n";
  return kExitOk;
}

}  // namespace

void AddTokenVerbs(CLI::App& app, JobCommandFlags* f) {
  CLI::App* whoami =
      AddVerb(app, f, "whoami", "Show who the API token belongs to");
  AddOutputFlag(whoami, f, {"json", "yaml"});

  CLI::App* token = AddVerb(
      app, f, "token",
      "API tokens (admin): create [--role R --user U --project P... | --join "
      "[--reusable] [--nodes N,...]] [--ttl D], list, revoke ID | revoke "
      "--node NAME");
  token->add_option("action", f->token_action, "create, list or revoke")
      ->required()
      ->check(CLI::IsMember({"create", "list", "revoke"}));
  token->add_option("id", f->token_id, "revoke: the token's ID");
  token->add_option("--role", f->token_role, "create: admin, operator, user")
      ->capture_default_str();
  token->add_option("--user", f->token_user, "create: the user's name");
  token->add_option("--project", f->token_projects,
                    "create: a project the user may submit to (repeat; * for "
                    "all)");
  token->add_option("--ttl", f->token_ttl,
                    "create: lifetime (1h, 7d, ...); default none");
  token->add_flag("--join", f->token_join,
                  "create: a bootstrap token for agents to join with");
  token->add_flag("--once", f->token_once,
                  "create --join: redeemable by one node only (the default; "
                  "kept for older scripts)");
  token->add_flag("--reusable", f->token_reusable,
                  "create --join: any number of nodes may join with it "
                  "(each only while it has no live credential)");
  token
      ->add_option("--nodes", f->token_nodes,
                   "create --join: only these nodes may join with it, each "
                   "once (comma-separated)")
      ->delimiter(',');
  token->add_option("--description", f->token_description,
                    "create: a note shown by `token list`");
  token->add_option("--node", f->token_node,
                    "revoke: the node whose credential to revoke");
  AddOutputFlag(token, f, {"json", "yaml"});
}

std::optional<int> RunTokenVerb(const Verb& v) {
  if (v.name == "whoami") return WhoAmI(v);
  if (v.name == "token") return Token(v);
  return std::nullopt;
}

}  // namespace loom::cli
