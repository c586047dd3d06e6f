// The routes of jobs (docs/api.md): submit, list, read, events, cancel,
// release (one or many), checkpoint reports and logs.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "loom/core/job_spec.h"
#include "loom/server/container_check.h"
#include "loom/server/http_server.h"
#include "loom/server/log_proxy.h"
#include "loom/server/redact.h"
#include "loom/server/route_util.h"
#include "loom/server/submission_policy.h"

namespace loom {

void HttpServer::JobRoutes() {
  Handle("POST", "/v1/jobs", [this](const Request& req, Response& res) {
    absl::StatusOr<JobSpec> spec = ParseJobSpec(req.body, "request body");
    if (!spec.ok()) return ReplyError(res, spec.status());
    // Without authentication, everyone is an admin (X-Loom-User
    // names the user).
    const Principal p = PrincipalOf(req);
    if (absl::Status st = CheckSubmission(p, *controller_->cluster(), &*spec);
        !st.ok()) {
      return ReplyError(res, st);
    }
    const std::string user = p.user;
    bool created = false;
    std::string key = req.get_header_value("Idempotency-Key");
    if (key.size() > 128) {
      return ReplyError(
          res, absl::InvalidArgumentError("Idempotency-Key: at most 128 "
                                          "characters"));
    }
    // Keys are per user: another user's key never finds (and shows)
    // someone else's job.
    if (!key.empty() && options_.auth != nullptr) {
      key = absl::StrCat(PrincipalOf(req).user, ":", key);
    }
    // A job in an image: its reference and mounts are checked and its tag
    // resolved to a digest here, before the controller and outside its lock
    // (one registry request). A retry of a submission the controller has
    // already made (its Idempotency-Key) gets that job without asking the
    // registry again.
    if (spec->container.has_value() &&
        !controller_->KnowsRequest(key, absl::Now())) {
      if (absl::Status st = ResolveContainer(*controller_->cluster(),
                                             options_.image_resolver, &*spec);
          !st.ok()) {
        return ReplyError(res, st);
      }
    }
    absl::StatusOr<nlohmann::json> job =
        controller_->Submit(*std::move(spec), user, absl::Now(), key, &created);
    // A retried submission (same Idempotency-Key) gets its job with 200.
    ReplyResult(res, job, created ? 201 : 200);
    if (created) Wake();
  });
  Handle("GET", "/v1/jobs", [this](const Request& req, Response& res) {
    absl::StatusOr<JobQuery> f = JobQueryOf(req);
    if (!f.ok()) return ReplyError(res, f.status());
    const Principal p = PrincipalOf(req);
    const PrivateData hidden = controller_->cluster()->private_data;
    JobQuery q = *f;
    if (HidesJobsFrom(p, hidden)) q.limit = 0;  // filtered, then cut
    nlohmann::json jobs = controller_->ListJobs(q, absl::Now());
    FilterJobsFor(p, hidden, f->limit, jobs["jobs"]);
    for (nlohmann::json& j : jobs["jobs"]) Redact(p, j);
    Reply(res, 200, jobs);
  });
  // The job of a `{id}` route as its caller may see it.
  auto shown_job =
      [this](const Request& req) -> absl::StatusOr<nlohmann::json> {
    absl::StatusOr<JobId> id = JobOfRoute(req);
    if (!id.ok()) return id.status();
    absl::StatusOr<nlohmann::json> job = controller_->GetJob(*id, absl::Now());
    if (!job.ok()) return job;
    if (absl::Status st = ShowJobTo(PrincipalOf(req),
                                    controller_->cluster()->private_data, *job);
        !st.ok()) {
      return st;
    }
    return job;
  };
  Handle("GET", "/v1/jobs/{id}",
         [shown_job](const Request& req, Response& res) {
           ReplyResult(res, shown_job(req));
         });
  Handle("GET", "/v1/jobs/{id}/events",
         [shown_job](const Request& req, Response& res) {
           absl::StatusOr<nlohmann::json> job = shown_job(req);
           if (!job.ok()) return ReplyError(res, job.status());
           Reply(res, 200, {{"events", (*job)["events"]}});
         });
  // Cancel, release and hold: the caller's own job (or any, for an admin), then
  // a scheduling pass.
  using JobOp =
      absl::StatusOr<nlohmann::json> (Controller::*)(JobId, absl::Time);
  for (const std::pair<const char*, JobOp>& route :
       {std::pair<const char*, JobOp>{"/v1/jobs/{id}/cancel",
                                      &Controller::Cancel},
        {"/v1/jobs/{id}/release", &Controller::Release},
        {"/v1/jobs/{id}/hold", &Controller::Hold}}) {
    const JobOp op = route.second;
    Handle("POST", route.first, [this, op](const Request& req, Response& res) {
      absl::StatusOr<JobId> id = JobToTouch(req, false);
      if (!id.ok()) return ReplyError(res, id.status());
      ReplyResult(res, (controller_->*op)(*id, absl::Now()));
      Wake();
    });
  }
  Handle("POST", "/v1/jobs/{id}/checkpoint",
         [this](const Request& req, Response& res) {
           absl::StatusOr<JobId> id = JobToTouch(req, true);
           if (!id.ok()) return ReplyError(res, id.status());
           std::optional<int64_t> step;
           if (!req.body.empty()) {
             nlohmann::json body =
                 nlohmann::json::parse(req.body, nullptr, false);
             if (body.is_discarded() || !body.is_object()) {
               return ReplyError(res, absl::InvalidArgumentError(
                                          "body: must be a JSON object, e.g. "
                                          "{\"step\": 120}, or empty"));
             }
             if (body.contains("step")) {
               if (!body["step"].is_number_integer() ||
                   body["step"].get<int64_t>() < 0) {
                 return ReplyError(res,
                                   absl::InvalidArgumentError(
                                       "step: must be a non-negative integer"));
               }
               step = body["step"].get<int64_t>();
             }
           }
           ReplyResult(res, controller_->Checkpoint(*id, step, absl::Now()));
         });
  Handle("POST", "/v1/jobs/release", [this](const Request& req, Response& res) {
    // {"ids": [1, 2, ...]}: one write for all (`loom release --all`).
    constexpr size_t kMaxIds = 100000;
    nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object() || !body.contains("ids") ||
        !body["ids"].is_array()) {
      return ReplyError(res, absl::InvalidArgumentError(
                                 "ids: the body must be an object with a list "
                                 "of job IDs under `ids`"));
    }
    if (body["ids"].size() > kMaxIds) {
      return ReplyError(res, absl::InvalidArgumentError(absl::StrCat(
                                 "ids: at most ", kMaxIds, " per request")));
    }
    // Each id once (in the order given): naming a job 5,000 times costs
    // what naming it once does.
    std::vector<JobId> ids;
    absl::flat_hash_set<JobId> seen;
    for (const nlohmann::json& v : body["ids"]) {
      absl::StatusOr<JobId> id = JobIdOfJson(v);
      if (!id.ok()) {
        return ReplyError(res, absl::InvalidArgumentError(absl::StrCat(
                                   "ids: ", id.status().message())));
      }
      if (seen.insert(*id).second) ids.push_back(*id);
    }
    // Another user's jobs are refused one by one.
    const Principal p = PrincipalOf(req);
    std::vector<JobId> mine;
    std::map<JobId, absl::Status> refused;
    for (JobId id : ids) {
      absl::Status st = MayTouchJob(p, id, false);
      if (st.ok()) {
        mine.push_back(id);
      } else {
        refused[id] = st;
      }
    }
    std::vector<absl::Status> mine_errors;
    controller_->ReleaseMany(mine, absl::Now(), &mine_errors);
    std::vector<absl::Status> errors;
    for (size_t i = 0, k = 0; i < ids.size(); ++i) {
      auto r = refused.find(ids[i]);
      errors.push_back(r != refused.end() ? r->second : mine_errors[k++]);
    }
    nlohmann::json released = nlohmann::json::array();
    nlohmann::json failed = nlohmann::json::array();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (errors[i].ok()) {
        released.push_back(ids[i]);
      } else {
        int status = 0;
        failed.push_back(
            {{"id", ids[i]}, {"error", ErrorJson(errors[i], &status)}});
      }
    }
    Reply(res, 200, {{"released", released}, {"errors", failed}});
    Wake();
  });
  Handle(
      "GET", "/v1/jobs/{id}/logs", [this](const Request& req, Response& res) {
        // Logs are their owner's (and an admin's): not an operator's.
        absl::StatusOr<JobId> id = JobToTouch(req, false);
        if (!id.ok()) return ReplyError(res, id.status());
        // Numbers only: they are passed on to the agent's URL.
        int64_t task = 0, process = 0, offset = 0, run = -1;
        for (auto [name, value] :
             {std::pair<const char*, int64_t*>{"task", &task},
              {"process", &process},
              {"offset", &offset},
              {"run", &run}}) {
          if (req.has_param(name) &&
              (!absl::SimpleAtoi(req.get_param_value(name), value) ||
               *value < 0)) {
            return ReplyError(res, absl::InvalidArgumentError(absl::StrCat(
                                       name, ": not a non-negative number")));
          }
        }
        if (task > INT32_MAX || run > INT32_MAX) {
          return ReplyError(
              res, absl::InvalidArgumentError(absl::StrCat(
                       task > INT32_MAX ? "task" : "run", ": out of range")));
        }
        absl::StatusOr<Controller::TaskLogSource> where = controller_->TaskLogs(
            *id, static_cast<int>(task), static_cast<int>(run));
        if (!where.ok()) return ReplyError(res, where.status());
        TaskLogRequest r;
        r.address = where->address;
        r.node = where->node;
        r.task_id = where->task_id;
        r.agent_auth = AgentAuthorization(where->node);
        r.stream = req.has_param("stream") ? req.get_param_value("stream")
                                           : std::string("stdout");
        if (r.stream != "stdout" && r.stream != "stderr") {
          return ReplyError(res, absl::InvalidArgumentError(
                                     "stream: must be stdout or stderr"));
        }
        r.process = process;
        r.offset = offset;
        const std::string follow = req.get_param_value("follow");
        r.follow = follow == "1" || follow == "true";
        const JobId job = *id;
        const std::string task_id = where->task_id;
        const std::string authorization = req.get_header_value("Authorization");
        ServeTaskLogs(
            r,
            [this, job, task_id] {
              return controller_->TaskMayWrite(job, task_id);
            },
            [this, authorization] {
              return options_.auth == nullptr ||
                     options_.auth->Authenticate(authorization, absl::Now())
                         .ok();
            },
            LogProxyOptions(), res);
      });
}

}  // namespace loom
