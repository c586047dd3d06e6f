// The routes of what nodes cache for tasks (docs/api.md): images
// (docs/images.md): what each node holds and pulls (`loom images`), and
// pulls ahead of a run (`loom image pull`); datasets (docs/datasets.md):
// the named ones and what their fills took (`loom dataset add/list/rm`).

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "loom/core/job_spec.h"
#include "loom/server/container_check.h"
#include "loom/server/http_server.h"
#include "loom/server/redact.h"
#include "loom/server/route_util.h"

namespace loom {

void HttpServer::ImageRoutes() {
  Handle("GET", "/v1/images", [this](const Request& req, Response& res) {
    ReplyResult(res, controller_->ListImages(req.get_param_value("node")));
  });
  Handle("POST", "/v1/images/pull", [this](const Request& req, Response& res) {
    absl::StatusOr<nlohmann::json> body = JsonBody(req);
    if (!body.ok()) return ReplyError(res, body.status());
    auto image = body->find("image");
    if (image == body->end() || !image->is_string() ||
        image->get_ref<const std::string&>().empty()) {
      return ReplyError(res, absl::InvalidArgumentError(
                                 "image: required, a registry reference "
                                 "(host:5000/team/train:1.4)"));
    }
    std::vector<std::string> nodes;
    if (auto it = body->find("nodes"); it != body->end()) {
      if (!it->is_array()) {
        return ReplyError(res, absl::InvalidArgumentError(
                                   "nodes: must be a list of node names"));
      }
      for (const nlohmann::json& n : *it) {
        if (!n.is_string()) {
          return ReplyError(res, absl::InvalidArgumentError(
                                     "nodes: must be a list of node names"));
        }
        nodes.push_back(n.get<std::string>());
      }
    }
    std::string pool;
    if (auto it = body->find("pool"); it != body->end()) {
      if (!it->is_string()) {
        return ReplyError(res,
                          absl::InvalidArgumentError("pool: must be a name"));
      }
      pool = it->get<std::string>();
    }
    if (!nodes.empty() && !pool.empty()) {
      return ReplyError(res, absl::InvalidArgumentError(
                                 "pool: give nodes or a pool, not both"));
    }
    // The tag resolved to its digest as for a job (one registry request,
    // outside the controller's lock): every node pulls the same bits.
    JobSpec spec;
    spec.container.emplace();
    spec.container->image = image->get<std::string>();
    if (absl::Status st = ResolveContainer(*controller_->cluster(),
                                           options_.image_resolver, &spec);
        !st.ok()) {
      return ReplyError(
          res, absl::Status(st.code(),
                            absl::StrReplaceAll(
                                st.message(), {{"container.image", "image"}})));
    }
    const std::string pinned =
        ContainerLaunchJson(*spec.container)["image"].get<std::string>();
    ReplyResult(
        res, controller_->PullImage(pinned, spec.container->image, nodes, pool),
        202);
    Wake();
  });
}

void HttpServer::DatasetRoutes() {
  Handle("GET", "/v1/datasets", [this](const Request& req, Response& res) {
    const Principal p = PrincipalOf(req);
    nlohmann::json datasets = controller_->ListDatasets();
    if (!p.admin()) {
      RedactDatasetsFor(p, controller_->DatasetSourcesOf(p.user), datasets);
    }
    Reply(res, 200, datasets);
  });
  Handle("POST", "/v1/datasets", [this](const Request& req, Response& res) {
    absl::StatusOr<nlohmann::json> body = JsonBody(req);
    if (!body.ok()) return ReplyError(res, body.status());
    ReplyResult(
        res, controller_->AddDataset(*body, PrincipalOf(req).user, absl::Now()),
        201);
  });
  Handle("POST", "/v1/datasets/{name}/delete",
         [this](const Request& req, Response& res) {
           const std::string name = req.matches[1];
           absl::Status st = controller_->RemoveDataset(name);
           if (!st.ok()) return ReplyError(res, st);
           Reply(res, 200, {{"name", name}, {"deleted", true}});
         });
}

}  // namespace loom
