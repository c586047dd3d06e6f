#pragma once

#include "loom/server/auth.h"
#include "nlohmann/json.hpp"

namespace loom {

// Hides another user's command, environment and working directory from a
// caller that is neither the job's owner nor an admin: in the job's spec
// they become "(hidden: another user's job)", and wherever they appear in
// the rest of the job (its reason, its events, a task's error: an exec
// error quotes the argv) they are cut out as "(hidden)". Values under 4
// bytes are not cut from text (they would mangle every message). `job` is
// the API form of a job (`GET /v1/jobs/{id}`).
void RedactJobFor(const Principal& p, nlohmann::json& job);

}  // namespace loom
