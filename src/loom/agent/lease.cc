#include "loom/agent/lease.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "loom/agent/data_dir.h"
#include "loom/agent/json_values.h"
#include "loom/agent/task_files.h"

namespace loom {

using json = nlohmann::json;

absl::Status WriteLease(const std::string& path, const Lease& lease) {
  const std::string tmp = path + ".tmp";
  const std::string text = Dump(
      json{{"last_ack_sent_ms", absl::ToUnixMillis(lease.last_ack_sent)},
           {"fence_after_ms", absl::ToInt64Milliseconds(lease.fence_after)}});
  const char* step = "open";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                      kPrivateFileMode);
  bool ok = fd >= 0;
  if (ok) {
    step = "write";
    const ssize_t n = write(fd, text.data(), text.size());
    ok = n == static_cast<ssize_t>(text.size());
    const int err = n < 0 ? errno : EIO;  // EIO: a short write
    close(fd);
    errno = err;
  }
  if (ok) {
    step = "rename";
    ok = rename(tmp.c_str(), path.c_str()) == 0;
  }
  if (ok) return absl::OkStatus();
  return absl::Status(absl::ErrnoToStatusCode(errno),
                      absl::StrCat(step, ": ", std::strerror(errno)));
}

std::optional<Lease> ReadLease(const std::string& path) {
  absl::StatusOr<std::string> text = agent_internal::ReadWholeFile(path);
  if (!text.ok()) return std::nullopt;
  const json l = json::parse(*text, nullptr, false);
  if (!l.is_object()) return std::nullopt;
  std::optional<int64_t> sent = AsInt(l.value("last_ack_sent_ms", json()));
  std::optional<int64_t> fence = AsInt(l.value("fence_after_ms", json()));
  if (!sent || !fence || *fence <= 0) return std::nullopt;
  return Lease{absl::FromUnixMillis(*sent), absl::Milliseconds(*fence)};
}

}  // namespace loom
