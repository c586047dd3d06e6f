// Images on nodes (docs/images.md, "Images on nodes"): what agents say they
// hold and pull, `loom images`, and the pulls `loom image pull` asks for
// ahead of a run.

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/common/utf8.h"
#include "loom/server/controller.h"

namespace loom {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxNodeImages = 256;  // as agents cap their lists
constexpr size_t kMaxImageRefs = 8;
constexpr size_t kMaxImageText = 512;

// `v` as a string of at most kMaxImageText bytes ("" for anything else).
std::string ImageText(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_string()) return "";
  return std::string(
      TruncateUtf8(it->get_ref<const std::string&>(), kMaxImageText));
}

int64_t ImageBytes(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number_integer()) return 0;
  const int64_t v = it->get<int64_t>();
  return v > 0 ? v : 0;
}

bool IsDigest(const std::string& d) {
  return d.size() == 71 && d.rfind("sha256:", 0) == 0 &&
         d.find_first_not_of("0123456789abcdef", 7) == std::string::npos;
}

}  // namespace

void Controller::ApplyImages(int n, const json& body) {
  Node& node = nodes_[n];
  if (auto it = body.find("images"); it != body.end() && it->is_array()) {
    json images = json::array();
    std::vector<std::string> digests;
    for (const json& i : *it) {
      if (!i.is_object() || images.size() >= kMaxNodeImages) continue;
      const std::string digest = ImageText(i, "digest");
      if (!IsDigest(digest)) continue;
      json refs = json::array();
      if (auto r = i.find("refs"); r != i.end() && r->is_array()) {
        for (const json& ref : *r) {
          if (ref.is_string() && refs.size() < kMaxImageRefs) {
            refs.push_back(std::string(TruncateUtf8(
                ref.get_ref<const std::string&>(), kMaxImageText)));
          }
        }
      }
      images.push_back({{"digest", digest},
                        {"refs", refs},
                        {"bytes", ImageBytes(i, "bytes")}});
      digests.push_back(digest);
    }
    node.images = std::move(images);
    scheduler_->SetNodeImages(n, digests);
  }
  if (auto it = body.find("image_pulls"); it != body.end() && it->is_array()) {
    json pulls = json::array();
    for (const json& p : *it) {
      if (!p.is_object() || pulls.size() >= kMaxNodeImages) continue;
      const std::string state = ImageText(p, "state");
      if (state != "pulling" && state != "failed") continue;
      json entry = {{"image", ImageText(p, "image")},
                    {"digest", ImageText(p, "digest")},
                    {"state", state},
                    {"phase", ImageText(p, "phase")},
                    {"bytes_done", ImageBytes(p, "bytes_done")},
                    {"bytes_total", ImageBytes(p, "bytes_total")}};
      if (state == "failed") entry["error"] = ImageText(p, "error");
      pulls.push_back(std::move(entry));
    }
    node.image_pulls = std::move(pulls);
  }
}

absl::StatusOr<json> Controller::ListImages(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  json out = json::array();
  int found = -1;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const std::string& node = cluster_->nodes[i].name;
    if (!name.empty() && node != name) continue;
    found = static_cast<int>(i);
    int64_t bytes = 0;
    for (const json& image : nodes_[i].images) {
      bytes += image.value("bytes", int64_t{0});
    }
    out.push_back({{"node", node},
                   {"pool", cluster_->pools[cluster_->nodes[i].pool].name},
                   {"up", nodes_[i].state == Node::State::kUp},
                   {"bytes", bytes},
                   {"images", nodes_[i].images},
                   {"pulls", nodes_[i].image_pulls}});
  }
  if (!name.empty() && found < 0) {
    return absl::NotFoundError(absl::StrCat("no node '", name, "'"));
  }
  return json{{"nodes", std::move(out)}};
}

absl::StatusOr<json> Controller::PullImage(
    const std::string& pinned, const std::string& as_given,
    const std::vector<std::string>& names, const std::string& pool) {
  absl::MutexLock lock(&mu_);
  std::vector<int> targets;
  if (!names.empty()) {
    std::set<int> seen;
    for (const std::string& name : names) {
      const int n = NodeIndex(name);
      if (n < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("nodes: no node '", name, "' in the cluster"));
      }
      if (seen.insert(n).second) targets.push_back(n);
    }
  } else {
    int pool_index = -1;
    if (!pool.empty()) {
      for (size_t p = 0; p < cluster_->pools.size(); ++p) {
        if (cluster_->pools[p].name == pool) pool_index = static_cast<int>(p);
      }
      if (pool_index < 0) {
        std::vector<std::string> known;
        for (const PoolSpec& p : cluster_->pools) known.push_back(p.name);
        return absl::InvalidArgumentError(
            absl::StrCat("pool: no pool '", pool, "' (the cluster has ",
                         absl::StrJoin(known, ", "), ")"));
      }
    }
    for (size_t i = 0; i < cluster_->nodes.size(); ++i) {
      if (pool_index < 0 || cluster_->nodes[i].pool == pool_index) {
        targets.push_back(static_cast<int>(i));
      }
    }
  }
  json asked = json::array();
  json skipped = json::array();
  for (int n : targets) {
    const std::string& name = cluster_->nodes[n].name;
    if (nodes_[n].state != Node::State::kUp || nodes_[n].address.empty()) {
      skipped.push_back({{"node", name}, {"reason", "not up"}});
      continue;
    }
    // Until the agent says how its pull goes: asked (an older failure of
    // the same image is forgotten).
    const std::string digest = pinned.substr(pinned.rfind('@') + 1);
    json kept = json::array();
    for (json& p : nodes_[n].image_pulls) {
      if (p.value("digest", "") != digest) kept.push_back(std::move(p));
    }
    kept.push_back({{"image", as_given},
                    {"digest", digest},
                    {"state", "pulling"},
                    {"phase", "asked"},
                    {"bytes_done", 0},
                    {"bytes_total", 0}});
    nodes_[n].image_pulls = std::move(kept);
    AgentAction a;
    a.kind = AgentAction::Kind::kPullImage;
    a.node = name;
    a.address = nodes_[n].address;
    a.body = {{"image", pinned}, {"image_ref", as_given}};
    actions_.push_back(std::move(a));
    asked.push_back(name);
  }
  return json{{"image", as_given},
              {"pinned", pinned},
              {"nodes", std::move(asked)},
              {"skipped", std::move(skipped)}};
}

void Controller::ImagePullDelivered(const AgentAction& action,
                                    const absl::Status& status, bool started) {
  const int n = NodeIndex(action.node);
  if (n < 0) return;
  const std::string pinned = action.body.value("image", "");
  const std::string digest = pinned.substr(pinned.rfind('@') + 1);
  json& pulls = nodes_[n].image_pulls;
  for (auto it = pulls.begin(); it != pulls.end(); ++it) {
    if (it->value("digest", "") != digest ||
        it->value("phase", "") != "asked") {
      continue;
    }
    if (!status.ok()) {
      (*it)["state"] = "failed";
      (*it)["error"] = std::string(
          TruncateUtf8(std::string(status.message()), kMaxImageText));
    } else if (started) {
      pulls.erase(it);  // the node has it already
    }
    return;
  }
}

}  // namespace loom
