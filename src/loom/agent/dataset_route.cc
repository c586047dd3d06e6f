// `GET /v1/datasets/{version}/manifest` and `.../files/{path}` of the agent
// API (docs/datasets.md, "Peers"): a complete cached dataset version, read
// only, for the other nodes of a job that reads it. Callers present the
// token the server derived for this node and version (`ApiGuard::
// CheckDatasetPeer`), not the server's key. And `POST /v1/datasets/prefetch`
// (the server's key): fills versions ahead of a task (dataset_prefetch.h).

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "httplib.h"
#include "loom/agent/agent_api.h"
#include "loom/agent/api_reply.h"
#include "loom/agent/data_step.h"
#include "nlohmann/json.hpp"

namespace loom {

AgentNode* AgentApi::DatasetNode(const httplib::Request& req,
                                 httplib::Response& res) {
  const std::string version = req.matches[1];
  absl::StatusOr<AgentNode*> node = nodes_.Resolve(req.get_param_value("node"));
  if (!node.ok()) {
    SendStatus(res, node.status(), "node");
    return nullptr;
  }
  const ApiVerdict v = guard_.CheckDatasetPeer(
      (*node)->name, version, req.get_header_value("Authorization"));
  if (!v.allowed) {
    SendError(res, v.status, v.code, v.message);
    return nullptr;
  }
  if ((*node)->datasets == nullptr) {
    SendError(res, 404, "not_found",
              absl::StrCat("node ", (*node)->name, " has no dataset cache"));
    return nullptr;
  }
  return *node;
}

void AgentApi::HandleDatasetPrefetch(const httplib::Request& req,
                                     httplib::Response& res) {
  // {"data": [...]}: the items of a launch's `data` (data_step.h).
  const nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
  if (!body.is_object() || !body.contains("data")) {
    SendError(res, 400, "invalid_argument",
              "the body must be a JSON object with \"data\": the datasets "
              "to fill, as a launch's",
              "data");
    return;
  }
  std::string field;
  absl::StatusOr<std::vector<DatasetWant>> wants =
      ParseDataLaunch(body["data"], &field);
  if (!wants.ok()) {
    SendStatus(res, wants.status(), field);
    return;
  }
  absl::StatusOr<AgentNode*> node = nodes_.Resolve(req.get_param_value("node"));
  if (!node.ok()) {
    SendStatus(res, node.status(), "node");
    return;
  }
  if ((*node)->dataset_prefetches == nullptr) {
    SendError(res, 400, "failed_precondition",
              absl::StrCat("node ", (*node)->name,
                           " has no dataset cache (its agent runs fake "
                           "tasks)"));
    return;
  }
  nlohmann::json out = nlohmann::json::array();
  bool all_present = true;
  for (DatasetWant& w : *wants) {
    w.node = (*node)->name;
    const std::string state = (*node)->dataset_prefetches->Start(w);
    all_present = all_present && state == "present";
    out.push_back({{"version", w.version}, {"state", state}});
  }
  SendJson(res, all_present ? 200 : 202,
           {{"node", (*node)->name}, {"datasets", std::move(out)}});
}

void AgentApi::HandleDatasetManifest(const httplib::Request& req,
                                     httplib::Response& res) {
  AgentNode* node = DatasetNode(req, res);
  if (node == nullptr) return;
  absl::StatusOr<std::vector<DatasetEntry>> m =
      node->datasets->Manifest(req.matches[1]);
  if (!m.ok()) {
    SendStatus(res, m.status());
    return;
  }
  // Enough peers copy from here already: this one waits and asks again (or
  // asks a node that finished meanwhile).
  if (!node->datasets->AdmitPeer(req.matches[1], req.get_param_value("from"),
                                 absl::Now())) {
    SendError(res, 503, "unavailable",
              absl::StrCat("node ", node->name,
                           " serves as many peers as it may; ask again"));
    return;
  }
  res.status = 200;
  res.set_content(DatasetManifestJson(*m), "application/json");
}

void AgentApi::HandleDatasetFile(const httplib::Request& req,
                                 httplib::Response& res) {
  AgentNode* node = DatasetNode(req, res);
  if (node == nullptr) return;
  node->datasets->TouchPeer(req.matches[1], req.get_param_value("from"),
                            absl::Now());
  absl::StatusOr<std::string> path =
      node->datasets->FilePath(req.matches[1], req.matches[2]);
  if (!path.ok()) {
    SendStatus(res, absl::IsInvalidArgument(path.status())
                        ? absl::NotFoundError(path.status().message())
                        : path.status());
    return;
  }
  const int fd = ::open(path->c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    if (fd >= 0) ::close(fd);
    SendError(res, 404, "not_found", "file not readable");
    return;
  }
  auto file = std::shared_ptr<int>(new int(fd), [](int* f) {
    ::close(*f);
    delete f;
  });
  res.status = 200;
  // The peer keeps its place while the bytes flow (every 4 MiB), not only
  // when it asks for a file.
  DatasetCache* cache = node->datasets.get();
  res.set_content_provider(
      static_cast<size_t>(st.st_size), "application/octet-stream",
      [file, cache, version = std::string(req.matches[1]),
       from = req.get_param_value("from")](size_t offset, size_t length,
                                           httplib::DataSink& sink) {
        char buf[1 << 16];
        const size_t want = std::min(length, sizeof buf);
        const ssize_t n = ::pread(*file, buf, want, static_cast<off_t>(offset));
        if (n <= 0) return false;
        if (offset % (size_t{4} << 20) < static_cast<size_t>(n)) {
          cache->TouchPeer(version, from, absl::Now());
        }
        return sink.write(buf, static_cast<size_t>(n));
      });
}

}  // namespace loom
