#pragma once

// The API's routes (docs/api.md) and who may call each (docs/security.md):
// one table that both the access check and the handlers are matched
// against, so that nothing unlisted is ever served. Stateless; safe from
// any thread.

#include <string>
#include <string_view>
#include <vector>

namespace loom {

// Who may call a route (docs/security.md).
enum class Access {
  kPublic,      // anyone, no token (health, who leads, the dashboard page)
  kAnyone,      // any valid token
  kHuman,       // admin, operator or user (further checks per job)
  kJobOrHuman,  // also a job's own token (its checkpoints)
  kOperator,    // admin or operator
  kAdmin,
  kAgent,  // a join token or a node credential (registration)
  kNode,   // a node credential (heartbeats)
};

// One route of the API: method, template ("/v1/jobs/{id}/logs") and who may
// call it. Every route the server serves is in this table (the server
// refuses to register one that is not), and requests are checked against
// it before any handler runs.
struct RouteRule {
  std::string method;
  std::string route;
  Access access;
};
const std::vector<RouteRule>& RouteTable();
// The rule for a request; null when no route matches. With `captures`,
// what the route's placeholders matched, percent-decoded. `{id}` matches
// only canonical job ids: 1 to 2^63-1 in decimal, no sign, no leading zero.
const RouteRule* FindRoute(std::string_view method, std::string_view path,
                           std::vector<std::string>* captures = nullptr);
// Whether any route has this path (for 405 against 404).
bool PathHasRoute(std::string_view path);
// The methods of the routes that have this path, in table order and
// separated by ", " (the `Allow` header of a 405); "" when none has it.
std::string AllowedMethods(std::string_view path);

// The route template of a request path, for metrics: "/v1/jobs/{id}/logs".
// Paths of no route give "other".
std::string RouteOf(std::string_view path);

}  // namespace loom
