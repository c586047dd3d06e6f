// `GET /v1/datasets/{version}/manifest` and `.../files/{path}` of the agent
// API (docs/datasets.md, "Peers"): a complete cached dataset version, read
// only, for the other nodes of a job that reads it. Callers present the
// token the server derived for this node and version (`ApiGuard::
// CheckDatasetPeer`), not the server's key.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "loom/agent/agent_api.h"
#include "loom/agent/api_reply.h"

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
  res.status = 200;
  res.set_content(DatasetManifestJson(*m), "application/json");
}

void AgentApi::HandleDatasetFile(const httplib::Request& req,
                                 httplib::Response& res) {
  AgentNode* node = DatasetNode(req, res);
  if (node == nullptr) return;
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
  res.set_content_provider(
      static_cast<size_t>(st.st_size), "application/octet-stream",
      [file](size_t offset, size_t length, httplib::DataSink& sink) {
        char buf[1 << 16];
        const size_t want = std::min(length, sizeof buf);
        const ssize_t n = ::pread(*file, buf, want, static_cast<off_t>(offset));
        if (n <= 0) return false;
        return sink.write(buf, static_cast<size_t>(n));
      });
}

}  // namespace loom
