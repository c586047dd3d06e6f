#include "loom/server/route_util.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "loom/common/job_id.h"

namespace loom {
namespace {

// True for the location a spec parser puts first: "<source>:<line>:<col>".
bool IsLocation(absl::string_view part) {
  std::vector<absl::string_view> pieces = absl::StrSplit(part, ':');
  if (pieces.size() < 3) return false;
  for (size_t i = pieces.size() - 2; i < pieces.size(); ++i) {
    int n = 0;
    if (!absl::SimpleAtoi(pieces[i], &n)) return false;
  }
  return true;
}

// True for a field path: not empty, no spaces.
bool IsFieldPath(absl::string_view s) {
  return !s.empty() && s.find(' ') == absl::string_view::npos;
}

// The field an InvalidArgument message names:
// "request body:3:5: resources.gpu_model: reason" -> "resources.gpu_model"
// (a location, then the field), "container.image: 'x' not found: ..." ->
// "container.image" (the field first); "" when there is none.
std::string FieldOf(absl::string_view message) {
  std::vector<absl::string_view> parts = absl::StrSplit(message, ": ");
  if (parts.size() < 2) return "";
  if (!IsLocation(parts[0]) && IsFieldPath(parts[0])) {
    return std::string(parts[0]);
  }
  // "<location>: <field>: reason", or "<source>: <field>: reason" when the
  // parser had no position.
  if (parts.size() < 3 || !IsFieldPath(parts[1])) return "";
  return std::string(parts[1]);
}

}  // namespace

void Reply(http::HttpResponse& res, int status, const nlohmann::json& body) {
  res.status = status;
  // Bytes that are not UTF-8 (a URL-decoded path quoted in an error, an
  // agent's message) become U+FFFD instead of throwing.
  res.set_content(
      body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
      "application/json");
}

nlohmann::json ErrorBody(std::string_view code, std::string_view message) {
  return {{"error",
           {{"code", std::string(code)}, {"message", std::string(message)}}}};
}

nlohmann::json ErrorJson(const absl::Status& st, int* http_status) {
  int status = 500;
  std::string code = "internal";
  std::string message(st.message());
  switch (st.code()) {
    case absl::StatusCode::kInvalidArgument:
      status = 400;
      code = "invalid_argument";
      break;
    case absl::StatusCode::kNotFound:
      status = 404;
      code = "not_found";
      break;
    case absl::StatusCode::kFailedPrecondition:
      if (message.rfind("infeasible: ", 0) == 0) {
        status = 400;
        code = "infeasible";
        message = message.substr(12);
      } else {
        status = 409;
        code = "failed_precondition";
      }
      break;
    case absl::StatusCode::kAborted:
      status = 409;  // a conflict: the state moved on since the caller read it
      code = "conflict";
      break;
    case absl::StatusCode::kPermissionDenied:
      status = 403;
      code = "permission_denied";
      break;
    case absl::StatusCode::kUnauthenticated:
      status = 401;
      code = "unauthenticated";
      break;
    case absl::StatusCode::kAlreadyExists:
      if (message.rfind("Idempotency-Key ", 0) == 0) {
        status = 422;  // the key was used for a different request
        code = "idempotency_key_reused";
      } else {
        status = 409;
        code = "already_exists";
      }
      break;
    case absl::StatusCode::kUnavailable:
      status = 503;
      code = "unavailable";
      break;
    case absl::StatusCode::kResourceExhausted:
      // A limit of the caller's (`limit: ...`); other exhaustion (a full
      // disk) stays a 500.
      if (message.rfind("limit: ", 0) == 0) {
        status = 429;
        code = "limit_exceeded";
        message = message.substr(7);
      }
      break;
    default:
      break;
  }
  nlohmann::json err = {{"code", code}, {"message", message}};
  if (code == "invalid_argument") {
    std::string field = FieldOf(st.message());
    if (!field.empty()) err["field"] = field;
  }
  *http_status = status;
  return err;
}

void ReplyError(http::HttpResponse& res, const absl::Status& st) {
  int status = 500;
  nlohmann::json err = ErrorJson(st, &status);
  Reply(res, status, {{"error", err}});
}

void ReplyResult(http::HttpResponse& res,
                 const absl::StatusOr<nlohmann::json>& r, int ok_status) {
  if (r.ok()) {
    Reply(res, ok_status, *r);
  } else {
    ReplyError(res, r.status());
  }
}

absl::StatusOr<JobQuery> JobQueryOf(const http::HttpRequest& req) {
  JobQuery f;
  if (req.has_param("state")) {
    for (absl::string_view s :
         absl::StrSplit(req.get_param_value("state"), ',')) {
      absl::StatusOr<JobState> st = ParseJobState(std::string(s));
      if (!st.ok()) return st.status();
      f.states.push_back(*st);
    }
  }
  f.project = req.get_param_value("project");
  f.user = req.get_param_value("user");
  if (req.has_param("limit") &&
      !absl::SimpleAtoi(req.get_param_value("limit"), &f.limit)) {
    return absl::InvalidArgumentError("limit: not a number");
  }
  return f;
}

absl::StatusOr<nlohmann::json> JsonBody(const http::HttpRequest& req) {
  nlohmann::json j = nlohmann::json::parse(req.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("the request body is not a JSON object");
  }
  return j;
}

absl::StatusOr<JobId> JobIdOf(const http::HttpRequest& req) {
  const std::string text = req.matches[1];
  absl::StatusOr<int64_t> id = ParseJobId(text);
  if (id.status().code() == absl::StatusCode::kOutOfRange) {
    return absl::NotFoundError(absl::StrCat("no job ", text));
  }
  if (!id.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad job id: ", id.status().message()));
  }
  return *id;
}

absl::StatusOr<JobId> JobIdOfJson(const nlohmann::json& v) {
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(v.dump(), " is not a job ID (at most ", INT64_MAX, ")"));
  }
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(v.dump(), " is not a job ID"));
  }
  return v.get<int64_t>();
}

}  // namespace loom
