#include "loom/server/route_util.h"

#include <string>

#include "gtest/gtest.h"

namespace loom {
namespace {

TEST(ErrorJson, StatusCodesAndHttpStatuses) {
  struct Case {
    absl::Status st;
    int http;
    std::string code;
    std::string message;
  };
  const Case cases[] = {
      {absl::InvalidArgumentError("tasks: must be positive"), 400,
       "invalid_argument", "tasks: must be positive"},
      {absl::NotFoundError("no job 9"), 404, "not_found", "no job 9"},
      {absl::FailedPreconditionError("infeasible: too big"), 400, "infeasible",
       "too big"},
      {absl::FailedPreconditionError("job 1 is held"), 409,
       "failed_precondition", "job 1 is held"},
      {absl::PermissionDeniedError("no"), 403, "permission_denied", "no"},
      {absl::UnauthenticatedError("who"), 401, "unauthenticated", "who"},
      {absl::AlreadyExistsError("Idempotency-Key k was used"), 422,
       "idempotency_key_reused", "Idempotency-Key k was used"},
      {absl::AlreadyExistsError("node x"), 409, "already_exists", "node x"},
      {absl::UnavailableError("store"), 503, "unavailable", "store"},
      {absl::ResourceExhaustedError("limit: 3 jobs"), 429, "limit_exceeded",
       "3 jobs"},
      {absl::ResourceExhaustedError("disk full"), 500, "internal", "disk full"},
      {absl::InternalError("boom"), 500, "internal", "boom"},
  };
  for (const Case& c : cases) {
    int http = 0;
    const nlohmann::json j = ErrorJson(c.st, &http);
    EXPECT_EQ(http, c.http) << c.st;
    EXPECT_EQ(j["code"], c.code) << c.st;
    EXPECT_EQ(j["message"], c.message) << c.st;
  }
  int http = 0;
  EXPECT_EQ(ErrorJson(absl::InvalidArgumentError(
                          "request body:3:5: resources.gpu_model: unknown"),
                      &http)["field"],
            "resources.gpu_model");
  EXPECT_EQ(ErrorJson(absl::InvalidArgumentError("tasks: must be positive"),
                      &http)["field"],
            "tasks");
  EXPECT_FALSE(ErrorJson(absl::InvalidArgumentError("no field here"), &http)
                   .contains("field"));
  // A message without a location that quotes more ": " after the field.
  EXPECT_EQ(ErrorJson(absl::InvalidArgumentError(
                          "container.image: 'a:1' not found: registry r: no"),
                      &http)["field"],
            "container.image");
  EXPECT_FALSE(ErrorJson(absl::InvalidArgumentError("no field: here"), &http)
                   .contains("field"));
}

TEST(Reply, ErrorsAreOneShape) {
  http::HttpResponse res;
  ReplyError(res, absl::NotFoundError("no job 9"));
  EXPECT_EQ(res.status, 404);
  EXPECT_EQ(nlohmann::json::parse(res.body),
            ErrorBody("not_found", "no job 9"));
  ReplyResult(res, nlohmann::json{{"ok", true}}, 201);
  EXPECT_EQ(res.status, 201);
  EXPECT_EQ(res.body, R"({"ok":true})");
  // Bytes that are not UTF-8 are replaced, never thrown.
  Reply(res, 400, {{"message", std::string("a\xff")}});
  EXPECT_EQ(res.body, "{\"message\":\"a\xef\xbf\xbd\"}");
}

TEST(JobIdOf, RoutesAndBodies) {
  http::HttpRequest req;
  req.matches = {"/v1/jobs/12", "12"};
  EXPECT_EQ(*JobIdOf(req), 12);
  req.matches = {"", "99999999999999999999"};
  EXPECT_EQ(JobIdOf(req).status(),
            absl::NotFoundError("no job 99999999999999999999"));
  req.matches = {"", "x"};
  EXPECT_EQ(JobIdOf(req).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*JobIdOfJson(7), 7);
  EXPECT_FALSE(JobIdOfJson(0).ok());
  EXPECT_FALSE(JobIdOfJson("7").ok());
  EXPECT_FALSE(JobIdOfJson(uint64_t{1} << 63).ok());
}

TEST(JsonBody, OnlyObjects) {
  http::HttpRequest req;
  req.body = R"({"a": 1})";
  EXPECT_EQ((*JsonBody(req))["a"], 1);
  for (const char* body : {"", "[1]", "3", "{"}) {
    req.body = body;
    EXPECT_EQ(
        JsonBody(req).status(),
        absl::InvalidArgumentError("the request body is not a JSON object"))
        << body;
  }
}

}  // namespace
}  // namespace loom
