#include "loom/agent/dataset_filler.h"

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "httplib.h"
#include "loom/agent/dataset_local_read.h"
#include "loom/common/atomic_file.h"
#include "loom/common/run_command.h"

namespace loom {
namespace fs = std::filesystem;

namespace {

std::unique_ptr<httplib::Client> PeerClient(const std::string& address) {
  auto c = std::make_unique<httplib::Client>("http://" + address);
  c->set_connection_timeout(3);
  c->set_read_timeout(60);
  c->set_keep_alive(true);
  return c;
}

httplib::Headers PeerHeaders(const DatasetWant::Peer& peer) {
  httplib::Headers h;
  if (!peer.token.empty()) h.emplace("Authorization", "Bearer " + peer.token);
  return h;
}

// `?node=PEER&from=SELF`: which node of the peer's agent serves, and who
// asks (the peer counts its clients by it).
std::string PeerQuery(const DatasetWant::Peer& peer, const std::string& self) {
  std::string q;
  if (!peer.node.empty()) q = "?node=" + EncodeDatasetPath(peer.node);
  if (!self.empty()) {
    absl::StrAppend(&q, q.empty() ? "?" : "&",
                    "from=", EncodeDatasetPath(self));
  }
  return q;
}

int64_t SizeOf(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : static_cast<int64_t>(n);
}

}  // namespace

std::string EncodeDatasetPath(const std::string& path) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (absl::ascii_isalnum(u) || c == '-' || c == '.' || c == '_' ||
        c == '~' || c == '/') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    }
  }
  return out;
}

absl::StatusOr<std::vector<DatasetEntry>> RcloneDatasetFiller::PeerManifest(
    const DatasetWant& want, int* peer) {
  const bool wait = !want.fill_from_store && !want.peers.empty();
  const absl::Time deadline = absl::Now() + options_.peer_wait;
  int unreachable = 0;  // answers in a row that never came from peers[0]
  while (true) {
    // A peer that has the version but serves as many nodes as it may (503):
    // wait for it or another, rather than read the cold store.
    bool busy = false;
    for (size_t i = 0; i < want.peers.size(); ++i) {
      const DatasetWant::Peer& p = want.peers[i];
      std::unique_ptr<httplib::Client> c = PeerClient(p.address);
      httplib::Result r =
          c->Get(absl::StrCat("/v1/datasets/", want.version, "/manifest",
                              PeerQuery(p, want.node)),
                 PeerHeaders(p));
      if (i == 0) unreachable = (!r || r->status == 401) ? unreachable + 1 : 0;
      busy = busy || (r && r->status == 503);
      if (!r || r->status != 200) continue;
      absl::StatusOr<std::vector<DatasetEntry>> m =
          ParseDatasetManifest(r->body);
      if (!m.ok()) continue;
      *peer = static_cast<int>(i);
      return m;
    }
    // The filling peer is gone (or refuses us): the cold store.
    if ((!wait && !busy) || unreachable >= 5 || absl::Now() >= deadline) {
      break;
    }
    absl::SleepFor(options_.peer_poll);
  }
  return absl::NotFoundError("no peer has the version complete");
}

absl::StatusOr<std::vector<DatasetEntry>> RcloneDatasetFiller::ListSource(
    const DatasetWant& want) {
  RcloneOptions rclone = Rclone();
  if (want.reader && IsLocalDatasetSource(want.source)) {
    rclone.as = &*want.reader;  // the job's user lists its own path
  }
  absl::StatusOr<std::string> out =
      RcloneListJson(rclone, want.source, options_.list_timeout);
  if (!out.ok()) {
    return absl::UnavailableError(
        absl::StrCat("dataset ", want.source, ": cold store unreachable: ",
                     RcloneErrorText(std::string(out.status().message()))));
  }
  return ParseRcloneLsjson(*out);
}

absl::StatusOr<std::map<std::string, std::string>> RcloneDatasetFiller::Hash(
    const std::string& type, const std::string& dir,
    const std::vector<std::string>& paths) {
  absl::StatusOr<std::map<std::string, std::string>> out =
      RcloneHashsum(Rclone(), type, dir, paths, options_.copy_timeout);
  if (!out.ok()) {
    return absl::Status(out.status().code(),
                        RcloneErrorText(std::string(out.status().message())));
  }
  return out;
}

absl::Status RcloneDatasetFiller::Copy(
    const DatasetWant& want, int peer, const std::vector<DatasetEntry>& entries,
    const std::string& dir, const std::function<void(int64_t)>& progress,
    DatasetCopyBytes* from) {
  std::vector<DatasetEntry> rest = entries;
  int64_t from_peer = 0;
  if (peer >= 0 && peer < static_cast<int>(want.peers.size())) {
    absl::Status st = CopyFromPeer(want.peers[peer], want.version, want.node,
                                   entries, dir, progress);
    // The files the peer gave whole count as its; the cold store has the
    // rest when it failed part way.
    rest.clear();
    for (const DatasetEntry& e : entries) {
      if (SizeOf(fs::path(dir) / e.path) == e.size) {
        from_peer += e.size;
      } else {
        rest.push_back(e);
      }
    }
    from->peer += from_peer;
    if (st.ok() || rest.empty()) return absl::OkStatus();
  }
  absl::Status st = CopyFromStore(
      want, rest, dir, [&](int64_t done) { progress(from_peer + done); });
  for (const DatasetEntry& e : rest) {
    if (SizeOf(fs::path(dir) / e.path) == e.size) from->cold += e.size;
  }
  return st;
}

absl::Status RcloneDatasetFiller::CopyFromStore(
    const DatasetWant& want, const std::vector<DatasetEntry>& entries,
    const std::string& dir, const std::function<void(int64_t)>& progress) {
  // A local path a user named: opened as that user, copied by root.
  if (want.reader && IsLocalDatasetSource(want.source)) {
    return CopyLocalSourceAs(*want.reader, want.source, entries, dir,
                             progress);
  }
  // Only the files missing here, named in a list beside the data.
  const std::string list = dir + ".files";
  std::string text;
  for (const DatasetEntry& e : entries) absl::StrAppend(&text, e.path, "\n");
  if (absl::Status st = WriteFileAtomically(list, text); !st.ok()) return st;
  std::vector<std::string> argv = RcloneArgv(Rclone(), "copy", 2);
  for (const std::string& extra :
       {std::string("--transfers"), absl::StrCat(options_.transfers),
        std::string("--files-from-raw"), list, std::string("--no-traverse"),
        std::string("--"), want.source, dir}) {
    argv.push_back(extra);
  }
  // Progress: the bytes of the listed files present, twice a second.
  absl::Notification done;
  std::thread meter([&] {
    while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(500))) {
      int64_t n = 0;
      for (const DatasetEntry& e : entries) n += SizeOf(fs::path(dir) / e.path);
      progress(n);
    }
  });
  absl::StatusOr<std::string> out =
      RunForOutput(argv, options_.copy_timeout, size_t{1} << 20);
  done.Notify();
  meter.join();
  std::error_code ec;
  fs::remove(list, ec);
  if (!out.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "dataset ", want.source, ": copy from the cold store failed: ",
        RcloneErrorText(std::string(out.status().message()))));
  }
  return absl::OkStatus();
}

absl::Status RcloneDatasetFiller::CopyFromPeer(
    const DatasetWant::Peer& peer, const std::string& version,
    const std::string& self, const std::vector<DatasetEntry>& entries,
    const std::string& dir, const std::function<void(int64_t)>& progress) {
  std::atomic<size_t> next{0};
  std::atomic<int64_t> copied{0};
  std::mutex mu;
  absl::Status failure;
  auto worker = [&] {
    std::unique_ptr<httplib::Client> c = PeerClient(peer.address);
    while (true) {
      const size_t i = next.fetch_add(1);
      if (i >= entries.size()) return;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!failure.ok()) return;
      }
      const DatasetEntry& e = entries[i];
      const fs::path target = fs::path(dir) / e.path;
      std::error_code ec;
      fs::create_directories(target.parent_path(), ec);
      const std::string part = target.string() + ".part";
      std::ofstream out(part, std::ios::binary | std::ios::trunc);
      httplib::Result r =
          c->Get(absl::StrCat("/v1/datasets/", version, "/files/",
                              EncodeDatasetPath(e.path), PeerQuery(peer, self)),
                 PeerHeaders(peer), [&](const char* data, size_t n) {
                   out.write(data, static_cast<std::streamsize>(n));
                   progress(copied.fetch_add(static_cast<int64_t>(n)) +
                            static_cast<int64_t>(n));
                   return static_cast<bool>(out);
                 });
      out.close();
      if (!r || r->status != 200 || !out) {
        fs::remove(part, ec);
        std::lock_guard<std::mutex> lock(mu);
        failure = absl::UnavailableError(
            absl::StrCat("copy of ", e.path, " from peer ", peer.node, " at ",
                         peer.address, " failed: ",
                         !r ? httplib::to_string(r.error())
                            : absl::StrCat("HTTP ", r->status)));
        return;
      }
      fs::rename(part, target, ec);
    }
  };
  std::vector<std::thread> threads;
  const int n = std::max(
      1, std::min<int>(options_.transfers, static_cast<int>(entries.size())));
  for (int i = 0; i < n; ++i) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  return failure;
}

}  // namespace loom
