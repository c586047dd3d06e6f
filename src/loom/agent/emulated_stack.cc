#include "loom/agent/emulated_stack.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "loom/agent/json_values.h"

namespace loom {
namespace {

constexpr size_t kMaxEmulatedVersionLength = 64;
// A version file larger than this is no version file.
constexpr size_t kMaxEmulatedVersionFileBytes = 4096;

bool EmulatedVersionChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
         c == '-' || c == '_' || c == '+';
}

}  // namespace

absl::Status CheckEmulatedVersion(const std::string& flag,
                                  const std::string& text) {
  if (text.empty() || text.size() > kMaxEmulatedVersionLength ||
      !std::all_of(text.begin(), text.end(), EmulatedVersionChar)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": '", text.substr(0, 80),
                     "' is not a version (letters, digits, '.', '-', '_', "
                     "'+'; at most 64)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadEmulatedVersionFile(const std::string& flag,
                                                    const std::string& path) {
  auto unreadable = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot read the version file ", path, ": ", why));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return unreadable(std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return unreadable("not a regular file");
  }
  std::string text(kMaxEmulatedVersionFileBytes + 1, '\0');
  size_t got = 0;
  int error = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = errno;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (error != 0) return unreadable(std::strerror(error));
  text.resize(got);
  const std::string version(absl::StripAsciiWhitespace(text));
  if (got > kMaxEmulatedVersionFileBytes ||
      !CheckEmulatedVersion(flag, version).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": the version file ", path, " holds '",
        Str(absl::string_view(version).substr(0, 80)),
        "', not a version (letters, digits, '.', '-', '_', '+'; at most 64)"));
  }
  return version;
}

absl::Status ResolveEmulatedVersionFlag(const std::string& flag,
                                        const std::string& value,
                                        std::string* version,
                                        std::string* file) {
  if (!value.empty() && value[0] == '@') {
    const std::string path = value.substr(1);
    if (path.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": '@' must be followed by a file name"));
    }
    absl::StatusOr<std::string> read = ReadEmulatedVersionFile(flag, path);
    if (!read.ok()) return read.status();
    *version = *std::move(read);
    *file = path;
    return absl::OkStatus();
  }
  if (absl::Status s = CheckEmulatedVersion(flag, value); !s.ok()) return s;
  *version = value;
  file->clear();
  return absl::OkStatus();
}

GpuSoftware RereadEmulatedSoftware(const GpuEmulation& emulation,
                                   const GpuSoftware& previous,
                                   std::vector<std::string>* warnings) {
  GpuSoftware out{emulation.driver_version, emulation.cuda_version};
  const struct {
    const char* flag;
    const std::string& file;
    const std::string& before;
    std::string& value;
  } fields[] = {
      {"--emulate-driver", emulation.driver_file, previous.driver, out.driver},
      {"--emulate-cuda", emulation.cuda_file, previous.cuda, out.cuda}};
  for (const auto& f : fields) {
    if (f.file.empty()) continue;
    absl::StatusOr<std::string> read = ReadEmulatedVersionFile(f.flag, f.file);
    if (read.ok()) {
      f.value = *std::move(read);
      continue;
    }
    f.value = f.before;
    warnings->push_back(absl::StrCat(Str(read.status().message()),
                                     "; the node keeps reporting '", f.before,
                                     "'"));
  }
  return out;
}

}  // namespace loom
