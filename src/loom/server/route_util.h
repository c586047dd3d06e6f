#pragma once

// What the API's route handlers share: reading a request (a JSON body, the
// job id of a route, the filters of a job listing) and writing an answer
// (a JSON body, or an `absl::Status` as the API's error object with its
// HTTP status: docs/api.md). Stateless; safe from any thread.

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/core/job.h"
#include "loom/http/http_message.h"
#include "loom/server/job_record.h"
#include "nlohmann/json.hpp"

namespace loom {

// Answers `body` as JSON with `status`. Bytes that are not UTF-8 (a
// URL-decoded path quoted in an error, an agent's message) become U+FFFD
// instead of throwing.
void Reply(http::HttpResponse& res, int status, const nlohmann::json& body);

// The API's error answer: {"error": {"code": code, "message": message}}.
nlohmann::json ErrorBody(std::string_view code, std::string_view message);

// The `{"code", "message", "field"?}` object of an error, and its HTTP
// status in `*http_status`: InvalidArgument 400 (with the field the
// message names), NotFound 404, FailedPrecondition 409 (400 "infeasible"
// for one that starts "infeasible: "), PermissionDenied 403,
// Unauthenticated 401, AlreadyExists 409 (422 for a reused
// Idempotency-Key), Unavailable 503, ResourceExhausted "limit: ..." 429;
// anything else 500.
nlohmann::json ErrorJson(const absl::Status& st, int* http_status);

// Answers `st` (not OK) as `{"error": ErrorJson(st)}` with its status.
void ReplyError(http::HttpResponse& res, const absl::Status& st);

// Answers `r`'s value with `ok_status`, or its error as `ReplyError`.
void ReplyResult(http::HttpResponse& res,
                 const absl::StatusOr<nlohmann::json>& r, int ok_status = 200);

// The body of `req` as a JSON object; InvalidArgument for anything else.
absl::StatusOr<nlohmann::json> JsonBody(const http::HttpRequest& req);

// The job ID of a route's first capture (`req.matches[1]`, `ParseJobId`):
// one too large to be any job's is NotFound "no job N" (404, N as
// written), anything else that is not a canonical positive decimal is
// InvalidArgument.
absl::StatusOr<JobId> JobIdOf(const http::HttpRequest& req);

// A job ID in a JSON body: an integer from 1 to 2^63-1 (an unsigned one
// beyond used to wrap to a negative ID); InvalidArgument otherwise.
absl::StatusOr<JobId> JobIdOfJson(const nlohmann::json& v);

// The filters of `GET /v1/jobs` (`state`, `project`, `user`, `limit`);
// InvalidArgument for an unknown state or a limit that is not a number.
absl::StatusOr<JobQuery> JobQueryOf(const http::HttpRequest& req);

}  // namespace loom
