#include "loom/agent/data_step.h"

#include <sys/mount.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/agent/dataset_local_read.h"
#include "loom/agent/launch_request.h"
#include "loom/common/units.h"
#include "loom/core/container_spec.h"
#include "loom/core/dataset_policy.h"

namespace loom {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxDatasets = 16;
constexpr size_t kMaxPeers = 1024;

absl::StatusOr<std::string> Text(const json& o, const char* key,
                                 const std::string& path, bool required,
                                 std::string* field) {
  auto it = o.find(key);
  if (it == o.end()) {
    if (!required) return std::string();
    return FieldError(field, absl::StrCat(path, ".", key), "is required");
  }
  if (!it->is_string() || it->get_ref<const std::string&>().size() > 4096) {
    return FieldError(field, absl::StrCat(path, ".", key),
                      "must be a string of at most 4096 bytes");
  }
  return it->get<std::string>();
}

// "2.1 GB from the cold store, 12 checksums checked", as the agent's log
// line says it.
std::string FillSummary(const DatasetFillStats& s) {
  std::vector<std::string> parts;
  if (s.cached_bytes > 0) {
    parts.push_back(
        absl::StrCat(FormatBytesDecimal(s.cached_bytes), " from the cache"));
  }
  if (s.peer_bytes > 0) {
    parts.push_back(
        absl::StrCat(FormatBytesDecimal(s.peer_bytes), " from peer ", s.peer));
  }
  if (s.cold_bytes > 0) {
    parts.push_back(
        absl::StrCat(FormatBytesDecimal(s.cold_bytes), " from the cold store"));
  }
  if (s.verified_files > 0) {
    parts.push_back(absl::StrCat(s.verified_files, " checksums checked"));
  }
  return parts.empty() ? "empty" : absl::StrJoin(parts, ", ");
}

int64_t Count(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number_integer()) return -1;
  return it->get<int64_t>();
}

class DataStep : public LaunchStep {
 public:
  std::string_view name() const override { return "data"; }

  absl::Status Prepare(LaunchContext& ctx, std::string* field) const override {
    if (ctx.request.data.empty()) return absl::OkStatus();
    if (ctx.node.datasets == nullptr) {
      return FieldError(field, "data",
                        absl::StrCat("node ", ctx.node.name,
                                     " has no dataset cache (its agent runs "
                                     "fake tasks)"));
    }
    if (!ctx.request.container && ::geteuid() != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data: node ", ctx.node.name,
          ": a host process sees its datasets through a read-only bind "
          "mount, which needs an agent running as root"));
    }
    return absl::OkStatus();
  }

  bool NeedsFetch(const LaunchContext& ctx) const override {
    return !ctx.request.data.empty() && ctx.data_binds.empty();
  }

  absl::Status Fetch(LaunchContext& ctx, ImagePullMeter& meter) const override {
    auto holds = std::make_shared<std::vector<std::shared_ptr<DatasetHold>>>();
    std::vector<std::pair<std::string, std::string>> binds;
    int64_t before = 0, all = 0;
    for (const DatasetWant& w : ctx.request.data) all += w.bytes;
    meter.dataset_filling.store(true);
    meter.bytes_total.store(all);
    nlohmann::json report = nlohmann::json::array();
    for (const DatasetWant& asked : ctx.request.data) {
      const absl::Time start = absl::Now();
      DatasetFillStats stats;
      DatasetWant w = asked;
      w.holder = ctx.request.task_id;  // held again after an agent restart
      w.node = ctx.node.name;
      // A local path is read with the rights of the task's user (when the
      // agent runs tasks as their users).
      if (ctx.user && ctx.user->uid != 0 && IsLocalDatasetSource(w.source)) {
        w.reader = *ctx.user;
      }
      absl::StatusOr<std::shared_ptr<DatasetHold>> hold =
          ctx.node.datasets->Ensure(
              w,
              [&](int64_t done, int64_t) {
                meter.bytes_done.store(before + done);
              },
              &stats);
      if (!hold.ok()) {
        meter.dataset_filling.store(false);
        const std::string why =
            absl::StrCat("dataset ", w.source, " on node ", ctx.node.name, ": ",
                         hold.status().message());
        ctx.log("warn", ctx.node.name,
                absl::StrCat("launch of task ", ctx.request.task_id,
                             " failed: ", why));
        // A file the job's user may not read fails every run alike.
        return absl::IsPermissionDenied(hold.status())
                   ? absl::PermissionDeniedError(why)
                   : absl::UnavailableError(why);
      }
      // Cached already, or copied from a peer: the user shows that it may
      // read every file of the source before its task sees the copy.
      if (w.reader) {
        absl::Status readable = absl::OkStatus();
        absl::StatusOr<std::vector<DatasetEntry>> files =
            ctx.node.datasets->Manifest(w.version);
        readable = files.ok() ? CheckLocalSourceReadable(*w.reader, w.source,
                                                         *files)
                              : files.status();
        if (!readable.ok()) {
          meter.dataset_filling.store(false);
          const std::string why =
              absl::StrCat("dataset ", w.source, " on node ", ctx.node.name,
                           ": ", readable.message());
          ctx.log("warn", ctx.node.name,
                  absl::StrCat("launch of task ", ctx.request.task_id,
                               " failed: ", why));
          return absl::PermissionDeniedError(why);
        }
      }
      before += w.bytes;
      meter.bytes_done.store(before);
      ctx.log("info", ctx.node.name,
              absl::StrCat("task ", ctx.request.task_id, ": dataset ", w.source,
                           " version ", w.version, " ready in ",
                           absl::FormatDuration(absl::Trunc(
                               absl::Now() - start, absl::Milliseconds(1))),
                           ": ", FillSummary(stats)));
      if (!stats.evicted.empty()) {
        ctx.log("info", ctx.node.name,
                absl::StrCat("dataset cache over its budget: deleted ",
                             "versions no task holds, least recently used "
                             "first: ",
                             absl::StrJoin(stats.evicted, ", ")));
      }
      report.push_back({{"source", w.source},
                        {"version", w.version},
                        {"cached_bytes", stats.cached_bytes},
                        {"peer_bytes", stats.peer_bytes},
                        {"cold_bytes", stats.cold_bytes},
                        {"fill_ms", absl::ToInt64Milliseconds(stats.fill_time)},
                        {"verified_files", stats.verified_files},
                        {"peer", stats.peer}});
      binds.emplace_back((*hold)->dir(), w.mount);
      holds->push_back(*std::move(hold));
    }
    meter.dataset_filling.store(false);
    ctx.data_binds = std::move(binds);
    ctx.data_report = std::move(report);
    ctx.data_holds = std::move(holds);
    return absl::OkStatus();
  }

  void Apply(const LaunchContext& ctx, const TaskProcess&, int,
             TaskSpec& spec) const override {
    if (ctx.data_binds.empty() || ctx.request.container) return;
    // A host process: its own mount namespace (spawn.cc) with each cached
    // copy bound read-only at its mount.
    if (!spec.sandbox) spec.sandbox.emplace();
    for (const auto& [dir, mount] : ctx.data_binds) {
      spec.sandbox->mounts.push_back(
          {dir, mount, "none", MS_BIND | MS_REC, "", /*user_target=*/true});
      spec.sandbox->mounts.push_back({"none", mount, "none",
                                      MS_BIND | MS_REMOUNT | MS_RDONLY, "",
                                      /*user_target=*/true});
    }
  }
};

}  // namespace

absl::StatusOr<std::vector<DatasetWant>> ParseDataLaunch(const json& data,
                                                         std::string* field) {
  if (!data.is_array() || data.size() > kMaxDatasets) {
    return FieldError(
        field, "data",
        absl::StrCat("must be a list of at most ", kMaxDatasets, " datasets"));
  }
  std::vector<DatasetWant> out;
  for (size_t i = 0; i < data.size(); ++i) {
    const std::string path = absl::StrCat("data[", i, "]");
    const json& d = data[i];
    if (!d.is_object()) return FieldError(field, path, "must be an object");
    DatasetWant w;
    for (auto [key, dest] :
         {std::pair{"source", &w.source}, std::pair{"mount", &w.mount},
          std::pair{"version", &w.version}}) {
      absl::StatusOr<std::string> t = Text(d, key, path, true, field);
      if (!t.ok()) return t.status();
      *dest = *std::move(t);
    }
    if (absl::Status st = CheckDatasetSource(w.source); !st.ok()) {
      return FieldError(field, path + ".source", std::string(st.message()));
    }
    absl::StatusOr<std::string> mount = NormalizeAbsolutePath(w.mount);
    if (!mount.ok() || *mount == "/") {
      return FieldError(field, path + ".mount",
                        "must be an absolute path other than /");
    }
    // The server's policy keeps mounts under its mount roots; whatever it
    // says, the node never lets a user's data cover its own system.
    if (IsSystemDirectory(*mount)) {
      return FieldError(field, path + ".mount",
                        absl::StrCat("'", *mount,
                                     "' is a system directory of the node: "
                                     "no dataset is mounted there"));
    }
    w.mount = *std::move(mount);
    if (!IsDatasetVersion(w.version)) {
      return FieldError(field, path + ".version",
                        "must be 16 lower-case hex digits");
    }
    if (auto f = d.find("fill_from_store"); f != d.end() && f->is_boolean()) {
      w.fill_from_store = f->get<bool>();
    }
    w.files = Count(d, "files");
    w.bytes = Count(d, "bytes");
    if (w.files < 0 || w.bytes < 0) {
      return FieldError(field, path + ".files",
                        "files and bytes must be whole numbers >= 0");
    }
    if (auto p = d.find("peers"); p != d.end()) {
      if (!p->is_array() || p->size() > kMaxPeers) {
        return FieldError(field, path + ".peers", "must be a list");
      }
      for (size_t k = 0; k < p->size(); ++k) {
        const json& peer = (*p)[k];
        const std::string pp = absl::StrCat(path, ".peers[", k, "]");
        if (!peer.is_object())
          return FieldError(field, pp, "must be an object");
        DatasetWant::Peer out_peer;
        for (auto [key, dest, required] :
             {std::tuple{"node", &out_peer.node, false},
              std::tuple{"address", &out_peer.address, true},
              std::tuple{"token", &out_peer.token, false}}) {
          absl::StatusOr<std::string> t = Text(peer, key, pp, required, field);
          if (!t.ok()) return t.status();
          *dest = *std::move(t);
        }
        w.peers.push_back(std::move(out_peer));
      }
    }
    out.push_back(std::move(w));
  }
  return out;
}

std::unique_ptr<const LaunchStep> MakeDataStep() {
  return std::make_unique<DataStep>();
}

}  // namespace loom
