#pragma once

// A thin typed client of the loom REST API (docs/api.md), used by the CLI
// verbs (`loom submit`, `loom queue`, ...). Every method is one HTTP request;
// results are the server's JSON objects as they are, errors are
// `absl::Status` values carrying the server's message.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace loom {

struct ApiClientOptions {
  // How long to wait for a TCP connection to one server.
  absl::Duration connect_timeout = absl::Seconds(3);
  // How long to wait for any part of a response. Log requests with
  // `follow` wait forever instead.
  absl::Duration read_timeout = absl::Seconds(30);
  // Sent as the `X-Loom-User` header when not empty: the user that jobs are
  // submitted as unless the spec names one.
  std::string user;
  // The bearer token sent on every request ("" sends none); see
  // `DiscoverToken`.
  std::string token;
  // For https:// servers: a PEM file of the CA(s) to verify the server's
  // certificate with ("" : the system's CAs).
  std::string ca_cert;
  // With several servers (a replicated controller), how long a request keeps
  // trying while none of them answers as the leader (a failover).
  absl::Duration failover_wait = absl::Seconds(15);
};

// Filters of `ListJobs`; empty or 0 fields do not filter.
struct JobFilter {
  std::vector<std::string> states;  // held, pending, running, ...
  std::string project;
  std::string user;
  int limit = 0;
};

// Filters of `AccountingJobs` (`GET /v1/accounting/jobs`, docs/api.md); empty
// or 0 fields do not filter. `since` and `until` are RFC 3339 times, sent as
// given.
struct AccountingFilter {
  // Job IDs, and array elements ("12_7"); an array's ID stands for its
  // elements.
  std::vector<std::string> ids;
  std::string user;
  std::string project;
  std::vector<std::string> states;  // loom's: succeeded, failed, ...
  std::string since;
  std::string until;
  int limit = 0;
};

// Which output of a job `StreamLogs` fetches.
struct LogRequest {
  int task = 0;
  int run = -1;                   // a run (LOOM_RESTART_COUNT); -1: current
  int process = 0;                // of a task that runs several
  std::string stream = "stdout";  // stdout | stderr

  int64_t offset = 0;   // first byte to send
  bool follow = false;  // keep streaming until the task ends
};

// Receives log bytes as they arrive; returns false to stop the stream early
// (then `StreamLogs` returns `Cancelled`).
using LogChunkFn = std::function<bool(std::string_view chunk)>;

// The `error.code` of a server error (`"invalid_argument"`, `"not_found"`,
// ...) that an `ApiClient` method returned, or "" for other statuses
// (network failures, bad responses, OK).
std::string ServerErrorCode(const absl::Status& status);

// The HTTP status of a server error that an `ApiClient` method returned, or
// 0 when the request got no HTTP answer.
int HttpStatusOf(const absl::Status& status);

// Normalises one server URL: "host:port" becomes "http://host:port", a
// trailing "/" is dropped. Returns InvalidArgument for anything but
// http(s)://host[:port] (paths are not supported).
absl::StatusOr<std::string> NormalizeServerUrl(std::string_view url);

// Talks to one loom server, or to the first reachable of several (a
// replicated controller). Requests go to the server that last answered;
// when it cannot be reached, or answers as a standby (307) or 503, the
// others are tried in turn, and while a replicated controller fails over
// they are tried again for up to `failover_wait`. A POST is only retried
// elsewhere when no connection could be made (so that it is never applied
// twice), except a job submission, which carries an idempotency key.
//
// Error mapping: a server error response becomes a status whose code
// follows `error.code` (invalid_argument and infeasible: InvalidArgument,
// not_found: NotFound, failed_precondition: FailedPrecondition,
// method_not_allowed: Unimplemented, too_large: ResourceExhausted,
// unavailable: Unavailable, others: Internal) and whose message is the
// server's `error.message`, led by `error.field` unless the message already
// names it. `ServerErrorCode` and `HttpStatusOf` read them back. A server
// that cannot be reached gives Unavailable, "cannot reach the loom server at
// http://127.0.0.1:7000: Connection refused".
//
// Thread-compatible: one instance must not be used by two threads at once.
class ApiClient {
 public:
  // `server_urls` must be non-empty and normalised (`NormalizeServerUrl`).
  explicit ApiClient(std::vector<std::string> server_urls,
                     ApiClientOptions options = {});

  // POST /v1/jobs. `spec` is a job spec as JSON (docs/job-spec.md).
  // Returns the new job.
  absl::StatusOr<nlohmann::json> SubmitJob(const nlohmann::json& spec);
  // GET /v1/jobs. Returns {"jobs": [...]} in submit order.
  absl::StatusOr<nlohmann::json> ListJobs(const JobFilter& filter = {});
  // GET /v1/jobs/{id}.
  absl::StatusOr<nlohmann::json> GetJob(int64_t id);
  // GET /v1/accounting/jobs: the jobs that pass `filter`, live and from the
  // accounting history. Returns {"jobs": [...]} in id order.
  absl::StatusOr<nlohmann::json> AccountingJobs(const AccountingFilter& filter);
  // GET /v1/usage: GPU-seconds per `by` ("project", "user" or
  // "project,user") and period `per` (hour, day, month or all) from `since`
  // to `until` (RFC 3339 times). An empty `until` or `per` is not sent (the
  // server's defaults: now, all). Returns {"by", "per", "since", "until",
  // "rows", "total_gpu_seconds"}.
  absl::StatusOr<nlohmann::json> Usage(const std::string& by,
                                       const std::string& since,
                                       const std::string& until,
                                       const std::string& per);
  // POST /v1/jobs/{id}/cancel. Returns the job.
  // A job by its ID or as an array element ("12_7").
  absl::StatusOr<nlohmann::json> GetJobRef(const std::string& ref);
  absl::StatusOr<nlohmann::json> CancelJob(int64_t id);
  absl::StatusOr<nlohmann::json> HoldJob(int64_t id);
  // POST /v1/jobs/{id}/release. FailedPrecondition when it is not held.
  absl::StatusOr<nlohmann::json> ReleaseJob(int64_t id);
  // Reports a saved checkpoint of job `id` (step < 0: none given).
  absl::StatusOr<nlohmann::json> ReportCheckpoint(int64_t id, int64_t step);
  // Several held jobs in one request (`POST /v1/jobs/release`): answers
  // {"released": [ids], "errors": [{"id", "error"}]}.
  absl::StatusOr<nlohmann::json> ReleaseJobs(const std::vector<int64_t>& ids);
  // GET /v1/jobs/{id}/events. Returns {"events": [...]}.
  absl::StatusOr<nlohmann::json> JobEvents(int64_t id);
  // GET /v1/jobs/{id}/logs: calls `on_chunk` with the output as it arrives
  // (with `follow`, until the task ends or `on_chunk` returns false). The
  // read timeout does not apply with `follow`.
  absl::Status StreamLogs(int64_t id, const LogRequest& request,
                          const LogChunkFn& on_chunk);

  // GET /v1/nodes. Returns the server's object ({"nodes": [...]}).
  absl::StatusOr<nlohmann::json> ListNodes();
  // GET /v1/nodes/{name}.
  absl::StatusOr<nlohmann::json> GetNode(std::string_view name);
  // POST /v1/nodes/{name}/cordon, /uncordon, /drain. Return what the server
  // answers (the node, or an empty object for an empty body).
  absl::StatusOr<nlohmann::json> CordonNode(std::string_view name);
  absl::StatusOr<nlohmann::json> UncordonNode(std::string_view name);
  absl::StatusOr<nlohmann::json> DrainNode(std::string_view name);

  // POST /v1/chaos (fault injection): `fault` is the request body,
  // {"action": ..., "node"|"job": ..., ...}.
  absl::StatusOr<nlohmann::json> Chaos(const nlohmann::json& fault);

  // GET /v1/projects. Returns {"projects": [...]}.
  absl::StatusOr<nlohmann::json> ListProjects();

  // GET /v1/images[?node=N]: the images each node holds and pulls.
  absl::StatusOr<nlohmann::json> ListImages(std::string_view node = "");
  // POST /v1/images/pull: {image, nodes?, pool?}.
  absl::StatusOr<nlohmann::json> PullImage(const nlohmann::json& request);

  // Datasets (docs/datasets.md): GET /v1/datasets, POST /v1/datasets
  // ({name, source, description?}), POST /v1/datasets/NAME/delete.
  absl::StatusOr<nlohmann::json> ListDatasets();
  absl::StatusOr<nlohmann::json> AddDataset(const nlohmann::json& request);
  absl::StatusOr<nlohmann::json> DeleteDataset(std::string_view name);

  // Tokens (admin): GET /v1/tokens, POST /v1/tokens (`request` as in
  // docs/api.md; the answer holds the token, shown once), POST
  // /v1/tokens/{id}/revoke, POST /v1/nodes/{name}/revoke (a node's
  // credential). GET /v1/whoami (any token).
  absl::StatusOr<nlohmann::json> ListTokens();
  absl::StatusOr<nlohmann::json> CreateToken(const nlohmann::json& request);
  absl::StatusOr<nlohmann::json> RevokeToken(std::string_view id);
  absl::StatusOr<nlohmann::json> RevokeNode(std::string_view node);
  absl::StatusOr<nlohmann::json> WhoAmI();

  // The cluster as code (docs/api.md): POST /v1/cluster/plan, /apply and
  // /rollback with `request` as documented; GET /v1/cluster/revisions and
  // /v1/cluster/revisions/{n}.
  absl::StatusOr<nlohmann::json> PlanCluster(const nlohmann::json& request);
  absl::StatusOr<nlohmann::json> ApplyCluster(const nlohmann::json& request);
  absl::StatusOr<nlohmann::json> RollbackCluster(const nlohmann::json& request);
  absl::StatusOr<nlohmann::json> ClusterRevisions();
  absl::StatusOr<nlohmann::json> ClusterRevision(int64_t revision);

  // Rolling maintenance (docs/api.md): POST /v1/maintenance with `request`
  // ({pool | nodes, command, batch, ...}; admin) answers the new
  // maintenance; GET /v1/maintenance answers {"maintenances": [...]},
  // newest first, without their `node_status`; GET /v1/maintenance/{id}
  // one maintenance. `MaintenanceAction` posts /v1/maintenance/{id}/ACTION
  // for `action` pause, resume or abort (admin; another action is
  // InvalidArgument, sent nowhere) and answers the maintenance after it.
  absl::StatusOr<nlohmann::json> StartMaintenance(
      const nlohmann::json& request);
  absl::StatusOr<nlohmann::json> ListMaintenances();
  absl::StatusOr<nlohmann::json> GetMaintenance(int64_t id);
  absl::StatusOr<nlohmann::json> MaintenanceAction(int64_t id,
                                                   std::string_view action);

  // Inference services (docs/services.md, docs/api.md). `ApplyService`
  // posts `spec_text`, a service spec as YAML or JSON, as it is (the server
  // parses it) to POST /v1/services and answers the service: created, or
  // updated when it differs from the one applied before, or as it was.
  // `ListServices` (GET /v1/services) answers {"services": [...]};
  // `GetService` GET /v1/services/{name}; `ScaleService` POST
  // /v1/services/{name}/scale {"replicas": N}; `DeleteService` POST
  // /v1/services/{name}/delete (its replicas drain and stop). Each answers
  // the service as the server writes it.
  absl::StatusOr<nlohmann::json> ApplyService(const std::string& spec_text);
  absl::StatusOr<nlohmann::json> ListServices();
  absl::StatusOr<nlohmann::json> GetService(std::string_view name);
  absl::StatusOr<nlohmann::json> ScaleService(std::string_view name,
                                              int replicas);
  absl::StatusOr<nlohmann::json> DeleteService(std::string_view name);

  // The gateway's (docs/services.md): GET /v1/gateway/config, what it
  // serves; POST /v1/gateway/report with `report`, its traffic per service.
  absl::StatusOr<nlohmann::json> GatewayConfig();
  absl::StatusOr<nlohmann::json> GatewayReport(const nlohmann::json& report);

  const std::vector<std::string>& server_urls() const { return urls_; }

 private:
  // Sends one request, trying the servers in turn; see the class comment.
  // With an `idempotency_key` (sent as `Idempotency-Key`) a POST is also
  // sent again to another server when its answer was lost. A POST's body is
  // sent as `content_type`.
  absl::StatusOr<nlohmann::json> Call(
      const std::string& method, const std::string& path,
      const std::string& body, const std::string& idempotency_key = "",
      const std::string& content_type = "application/json");
  absl::StatusOr<nlohmann::json> NodeAction(std::string_view name,
                                            std::string_view action);

  // Constant after construction.
  const std::vector<std::string> urls_;
  const ApiClientOptions options_;

  size_t preferred_ = 0;  // index into `urls_` of the last server that answered
};

}  // namespace loom
