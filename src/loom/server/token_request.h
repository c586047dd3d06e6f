#pragma once

// The body of `POST /v1/tokens` (docs/api.md, docs/security.md), read
// strictly: unknown fields, wrong types and invalid names are refused with
// InvalidArgument naming the field, before anything is made.

#include "absl/status/statusor.h"
#include "loom/core/cluster.h"
#include "loom/server/auth.h"
#include "nlohmann/json.hpp"

namespace loom {

// The longest `description` of a token.
inline constexpr size_t kMaxTokenDescription = 256;

// Reads `body`: {"role": "user"|"operator"|"admin"|"join" (default user),
// "user": NAME (not for join), "projects": [NAME|"*", ...] (not for join),
// "ttl_seconds": 0 (none) or 1 to 10 years, "reusable": bool (join),
// "nodes": [NODE, ...] (join: each must be a node of `cluster`),
// "once": bool (what older clients send; ignored: join tokens are
// single-use unless `reusable`), "description": TEXT}. User names follow
// `IsValidUserName`, project names `IsValidProjectName`.
absl::StatusOr<TokenRequest> ParseTokenRequest(const nlohmann::json& body,
                                               const Cluster& cluster);

}  // namespace loom
