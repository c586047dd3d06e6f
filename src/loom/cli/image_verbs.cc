#include "loom/cli/image_verbs.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "loom/cli/output_format.h"
#include "loom/cli/reply_fields.h"
#include "loom/cli/verb_flags.h"
#include "loom/client/api_client.h"
#include "loom/common/units.h"

namespace loom {

using cli::Cell;
using cli::Int;
using cli::Items;
using cli::Json;
using cli::Str;

namespace {

// "sha256:0123456789ab" of a digest, as `docker images` shortens IDs.
std::string ShortDigest(const std::string& digest) {
  return digest.size() > 19 ? digest.substr(0, 19) : digest;
}

std::string PullState(const Json& pull) {
  if (Str(pull, "state") == "failed") {
    return absl::StrCat("failed: ", Str(pull, "error"));
  }
  const int64_t done = Int(pull, "bytes_done").value_or(0);
  const int64_t total = Int(pull, "bytes_total").value_or(0);
  const std::string phase = Str(pull, "phase");
  if (phase == "asked" || phase == "manifest" || total == 0) {
    return "pulling";
  }
  return absl::StrCat(phase == "unpacking" ? "unpacking " : "pulling ",
                      FormatBytesOf(done, total));
}

}  // namespace

std::string FormatImageTable(const Json& images) {
  std::vector<std::vector<std::string>> rows;
  for (const Json& node : Items(images, "nodes")) {
    const std::string name = Cell(node, "node");
    for (const Json& image : Items(node, "images")) {
      std::vector<std::string> refs;
      for (const Json& r : Items(image, "refs")) {
        if (r.is_string()) refs.push_back(r.get<std::string>());
      }
      rows.push_back({name, refs.empty() ? "-" : absl::StrJoin(refs, ","),
                      ShortDigest(Str(image, "digest")),
                      FormatBytes(Int(image, "bytes").value_or(0)), "present"});
    }
    for (const Json& pull : Items(node, "pulls")) {
      rows.push_back({name, Cell(pull, "image"),
                      ShortDigest(Str(pull, "digest")), "-", PullState(pull)});
    }
  }
  return FormatTable({"NODE", "IMAGE", "DIGEST", "SIZE", "STATE"}, rows);
}

namespace cli {
namespace {

int Images(const Verb& v) {
  return RequestAndPrint(
      v, [&](ApiClient& client) { return client.ListImages(v.flags.node); },
      [](const Json& images) { return FormatImageTable(images); });
}

// Waits until each node of `asked` holds `digest` or failed to pull it.
int WaitForPulls(const Verb& v, ApiClient& client, const std::string& digest,
                 std::set<std::string> asked, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Time next_note = absl::Now() + absl::Seconds(10);
  std::vector<std::string> failed;
  while (!asked.empty()) {
    absl::StatusOr<Json> images = client.ListImages();
    if (!images.ok()) return v.Fail(kExitFailed, images.status());
    std::map<std::string, std::string> progress;
    for (const Json& node : Items(*images, "nodes")) {
      const std::string name = Str(node, "node");
      if (!asked.contains(name)) continue;
      bool done = false;
      for (const Json& image : Items(node, "images")) {
        if (Str(image, "digest") != digest) continue;
        v.out() << name << ": pulled ("
                << FormatBytes(Int(image, "bytes").value_or(0)) << ")\n";
        done = true;
      }
      for (const Json& pull : Items(node, "pulls")) {
        if (done || Str(pull, "digest") != digest) continue;
        if (Str(pull, "state") == "failed") {
          v.out() << name << ": " << PullState(pull) << "\n";
          failed.push_back(name);
          done = true;
        } else {
          progress[name] = PullState(pull);
        }
      }
      if (done) asked.erase(name);
    }
    if (asked.empty()) break;
    if (absl::Now() > deadline) {
      return v.Fail(kExitFailed,
                    absl::StrCat("timed out after ",
                                 absl::FormatDuration(timeout), "; ",
                                 asked.size(), " node(s) still pulling: ",
                                 absl::StrJoin(asked, ",")));
    }
    if (absl::Now() >= next_note) {
      std::vector<std::string> parts;
      for (const std::string& n : asked) {
        auto it = progress.find(n);
        parts.push_back(absl::StrCat(
            n, " ", it == progress.end() ? "waiting" : it->second));
      }
      v.out() << "still pulling: " << absl::StrJoin(parts, ", ") << "\n";
      next_note = absl::Now() + absl::Seconds(10);
    }
    if (!SleepUnlessInterrupted(v.ctx)) {
      v.err() << "loom image: interrupted; the nodes go on pulling\n";
      return 130;
    }
  }
  if (!failed.empty()) {
    return v.Fail(kExitFailed, absl::StrCat("the pull failed on ",
                                            absl::StrJoin(failed, ",")));
  }
  return kExitOk;
}

int Image(const Verb& v) {
  const JobCommandFlags& f = v.flags;
  if (f.image_action != "pull") {
    return v.Fail(kExitUsage,
                  absl::StrCat("image: '", f.image_action,
                               "' is not an action (pull)"));
  }
  if (!f.image_pool.empty() && !f.image_nodes.empty()) {
    return v.Fail(kExitUsage, "give --pool or --nodes, not both");
  }
  absl::StatusOr<absl::Duration> timeout = ParseDuration(f.timeout);
  if (!timeout.ok()) return v.Fail(kExitUsage, timeout.status());
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  Json request = {{"image", f.image_ref}};
  if (!f.image_pool.empty()) request["pool"] = f.image_pool;
  if (!f.image_nodes.empty()) request["nodes"] = f.image_nodes;
  absl::StatusOr<Json> answer = client->PullImage(request);
  if (!answer.ok()) return v.Fail(kExitFailed, answer.status());
  if (v.PrintStructured(*answer) && f.no_wait) return kExitOk;
  std::set<std::string> asked;
  for (const Json& n : Items(*answer, "nodes")) {
    if (n.is_string()) asked.insert(n.get<std::string>());
  }
  const std::string pinned = Str(*answer, "pinned");
  if (f.output.empty()) {
    v.out() << "pulling " << Str(*answer, "image") << " (" << pinned
            << ") on " << asked.size() << " node(s)";
    std::vector<std::string> skipped;
    for (const Json& s : Items(*answer, "skipped")) {
      skipped.push_back(absl::StrCat(Str(s, "node"), " (", Str(s, "reason"),
                                     ")"));
    }
    if (!skipped.empty()) v.out() << "; skipped " << absl::StrJoin(skipped, ", ");
    v.out() << "\n";
  }
  if (f.no_wait) return kExitOk;
  return WaitForPulls(v, *client, pinned.substr(pinned.rfind('@') + 1),
                      std::move(asked), *timeout);
}

}  // namespace

void AddImageVerbs(CLI::App& app, JobCommandFlags* f) {
  CLI::App* images =
      AddVerb(app, f, "images", "List the container images each node holds");
  images->add_option("--node", f->node, "Only this node");
  AddOutputFlag(images, f, {"json", "yaml"});

  CLI::App* image = AddVerb(
      app, f, "image",
      "Container images on nodes (operator): pull REF [--pool P | --nodes "
      "N1,N2] pre-pulls an image before a run or an upgrade");
  image->add_option("action", f->image_action, "pull")
      ->required()
      ->check(CLI::IsMember({"pull"}));
  image->add_option("ref", f->image_ref,
                    "The image (host:5000/team/train:1.4 or ...@sha256:...)")
      ->required();
  image->add_option("--pool", f->image_pool, "Every node of this pool");
  image->add_option("--nodes", f->image_nodes, "These nodes (comma-separated)")
      ->delimiter(',');
  image->add_flag("--no-wait", f->no_wait,
                  "Return once the nodes are asked, without waiting");
  image->add_option("--timeout", f->timeout,
                    "How long to wait for every node (default 30m)");
  AddOutputFlag(image, f, {"json", "yaml"});
}

std::optional<int> RunImageVerb(const Verb& v) {
  if (v.name == "images") return Images(v);
  if (v.name == "image") return Image(v);
  return std::nullopt;
}

}  // namespace cli
}  // namespace loom
