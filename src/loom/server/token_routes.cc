// The routes of API tokens and of the caller's own identity (docs/api.md,
// docs/security.md): `GET /v1/whoami`, `GET`/`POST /v1/tokens` and
// `POST /v1/tokens/{token}/revoke`.

#include "absl/time/clock.h"
#include "loom/server/http_server.h"
#include "loom/server/route_util.h"
#include "loom/server/token_request.h"

namespace loom {

void HttpServer::TokenRoutes() {
  Handle("GET", "/v1/whoami", [this](const Request& req, Response& res) {
    const Principal p = PrincipalOf(req);
    nlohmann::json j = {{"role", std::string(RoleName(p.role))},
                        {"user", p.user},
                        {"projects", p.projects},
                        {"token", p.token_id}};
    if (p.role == Role::kJob) j["job"] = p.job;
    Reply(res, 200, j);
  });
  Handle("GET", "/v1/tokens", [this](const Request&, Response& res) {
    nlohmann::json out = nlohmann::json::array();
    if (options_.auth != nullptr) {
      for (const TokenRecord& t : options_.auth->List()) {
        out.push_back(TokenRecordToJson(t, /*with_hash=*/false));
      }
    }
    Reply(res, 200, {{"tokens", std::move(out)}});
  });
  Handle("POST", "/v1/tokens", [this](const Request& req, Response& res) {
    if (absl::Status st = NeedAuthentication(); !st.ok()) {
      return ReplyError(res, st);
    }
    absl::StatusOr<nlohmann::json> body = JsonBody(req);
    if (!body.ok()) return ReplyError(res, body.status());
    absl::StatusOr<TokenRequest> t =
        ParseTokenRequest(*body, *controller_->cluster());
    if (!t.ok()) return ReplyError(res, t.status());
    absl::StatusOr<std::pair<TokenRecord, std::string>> made =
        options_.auth->Create(*t, absl::Now());
    if (!made.ok()) return ReplyError(res, made.status());
    nlohmann::json j = TokenRecordToJson(made->first, /*with_hash=*/false);
    j["token"] = made->second;  // the only time it is shown
    Reply(res, 201, j);
  });
  Handle("POST", "/v1/tokens/{token}/revoke",
         [this](const Request& req, Response& res) {
           if (absl::Status st = NeedAuthentication(); !st.ok()) {
             return ReplyError(res, st);
           }
           absl::StatusOr<TokenRecord> t =
               options_.auth->Revoke(req.matches[1], absl::Now());
           if (!t.ok()) return ReplyError(res, t.status());
           Reply(res, 200, TokenRecordToJson(*t, /*with_hash=*/false));
         });
}

}  // namespace loom
