#include "loom/server/server_secrets.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "loom/common/digest.h"

namespace loom {
namespace {

// Where an older loom kept the secret, in clear, in the store.
constexpr char kLegacySecretKey[] = "/auth/cluster-secret";
// The id of the cluster's secret key (not the key): an HMAC of a constant.
constexpr char kSecretKeyIdKey[] = "/auth/secret-key-id";

std::string Mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

bool IsKey(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string KeyId(const std::string& key) {
  return HmacSha256Hex(key, "loom secret key id").substr(0, 16);
}

// Writes `text` to `path`, mode 0600, only if `path` does not exist:
// through a temporary file linked into place, so that the file is never
// seen half-written. AlreadyExists if another writer was first.
absl::Status CreateExclusively(const std::string& path,
                               const std::string& text) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", tmp));
  }
  bool ok = ::fchmod(fd, 0600) == 0 &&
            ::write(fd, text.data(), text.size()) ==
                static_cast<ssize_t>(text.size()) &&
            ::fsync(fd) == 0;
  const int write_errno = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return absl::ErrnoToStatus(write_errno, absl::StrCat("cannot write ", tmp));
  }
  const int linked = ::link(tmp.c_str(), path.c_str());
  const int link_errno = errno;
  ::unlink(tmp.c_str());
  if (linked != 0) {
    if (link_errno == EEXIST) {
      return absl::AlreadyExistsError(absl::StrCat(path, " exists"));
    }
    return absl::ErrnoToStatus(link_errno,
                               absl::StrCat("cannot create ", path));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (const int dfd = ::open(dir.empty() ? "." : dir.c_str(),
                             O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadKeyFile(const std::string& path) {
  if (absl::Status st = CheckPrivateFile(path); !st.ok()) return st;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  if (!in && line.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read the secret key file ", path));
  }
  line = std::string(absl::StripAsciiWhitespace(line));
  if (!IsKey(line)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the secret key file ", path,
        " does not hold a loom secret key (64 lower-case hex digits)"));
  }
  return line;
}

}  // namespace

absl::Status CheckPrivateFile(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot stat ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a regular file"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " has mode ", Mode(st.st_mode),
        ": group or others may read or change it, and it holds secrets; "
        "`chmod 600 ",
        path,
        "` (and, if others may have read it, revoke and remake the "
        "tokens and credentials it holds)"));
  }
  return absl::OkStatus();
}

absl::Status CreatePrivateFile(const std::string& path) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return absl::OkStatus();
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", path));
  }
  // The umask may only have narrowed 0600; set it exactly anyway.
  const bool ok = ::fchmod(fd, 0600) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return absl::ErrnoToStatus(err, absl::StrCat("cannot chmod ", path));
  return absl::OkStatus();
}

absl::Status PrepareDataDir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot stat ", dir));
    }
    const std::filesystem::path p(dir);
    std::error_code ec;
    if (p.has_parent_path()) {
      std::filesystem::create_directories(p.parent_path(), ec);
      if (ec) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot create ", p.parent_path().string(), ": ", ec.message()));
      }
    }
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", dir));
    }
    // Exactly 0700, whatever the umask.
    if (::chmod(dir.c_str(), 0700) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot chmod ", dir));
    }
    if (::stat(dir.c_str(), &st) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot stat ", dir));
    }
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " is not a directory"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " has mode ", Mode(st.st_mode),
        ": group or others may use it, and it holds the state store (tokens, "
        "credentials) and secret keys; `chmod 700 ",
        dir,
        "` (and, if others may have read it, revoke and remake the "
        "tokens and credentials)"));
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", dir));
  }
  absl::Status result = absl::OkStatus();
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = absl::StrCat(dir, "/", name);
    struct stat fst;
    if (::lstat(path.c_str(), &fst) != 0 || !S_ISREG(fst.st_mode)) continue;
    if (absl::Status s = CheckPrivateFile(path); !s.ok()) {
      result = s;
      break;
    }
  }
  ::closedir(d);
  return result;
}

absl::StatusOr<SecretKeyLoad> LoadSecretKey(const std::string& path,
                                            StateStore* store) {
  SecretKeyLoad out;
  absl::StatusOr<KeyValue> legacy = store->Get(kLegacySecretKey);
  if (!legacy.ok() && legacy.status().code() != absl::StatusCode::kNotFound) {
    return legacy.status();
  }
  absl::StatusOr<KeyValue> stored_id = store->Get(kSecretKeyIdKey);
  if (!stored_id.ok() &&
      stored_id.status().code() != absl::StatusCode::kNotFound) {
    return stored_id.status();
  }
  struct stat st;
  const bool have_file = ::lstat(path.c_str(), &st) == 0;
  if (!have_file && errno != ENOENT) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot stat ", path));
  }
  if (!have_file) {
    std::string fresh;
    if (legacy.ok()) {
      fresh = std::string(absl::StripAsciiWhitespace(legacy->value));
      if (!IsKey(fresh)) {
        return absl::DataLossError(absl::StrCat(
            "the store's ", kLegacySecretKey, " is not a loom secret key"));
      }
      out.note = absl::StrCat("moved the cluster secret from the store (",
                              kLegacySecretKey, ") to ", path,
                              " (mode 0600); the store no longer holds it");
    } else if (stored_id.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no secret key file ", path,
          ", but this cluster's credentials were "
          "made with a secret key (key id ",
          stored_id->value,
          "): copy the secret key file (mode 0600) from the server that has "
          "it, and give every server the same one (--secret-key-file)"));
    } else {
      fresh = RandomHex(32);
      out.note =
          absl::StrCat("made a new secret key for this cluster in ", path,
                       " (mode 0600; every server of the cluster "
                       "needs the same file)");
    }
    absl::Status made = CreateExclusively(path, fresh + "\n");
    if (!made.ok() && made.code() != absl::StatusCode::kAlreadyExists) {
      return made;
    }
    if (!made.ok()) out.note.clear();  // another server made it first
  }
  absl::StatusOr<std::string> key = ReadKeyFile(path);
  if (!key.ok()) return key.status();
  if (legacy.ok() &&
      std::string(absl::StripAsciiWhitespace(legacy->value)) != *key) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the store still holds a cluster secret (", kLegacySecretKey,
        ") that differs from the key in ", path,
        ": the store's tokens and credentials were made with the store's; "
        "remove ",
        path, " to move the store's secret there"));
  }
  const std::string id = KeyId(*key);
  if (stored_id.ok() && stored_id->value != id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the secret key in ", path, " (key id ", id,
        ") is not the one this cluster's credentials were made with (key id ",
        stored_id->value,
        "): give every server the same key file (--secret-key-file)"));
  }
  std::vector<Condition> conditions;
  std::vector<Mutation> mutations;
  if (!stored_id.ok()) {
    conditions.push_back({kSecretKeyIdKey, Condition::kMustNotExist});
    mutations.push_back(Mutation::Put(kSecretKeyIdKey, id));
  }
  if (legacy.ok()) mutations.push_back(Mutation::Delete(kLegacySecretKey));
  if (!mutations.empty()) {
    absl::StatusOr<int64_t> r = store->Commit(conditions, mutations);
    if (!r.ok() && r.status().code() == absl::StatusCode::kFailedPrecondition &&
        !legacy.ok()) {
      // Another server wrote the id first: it must be ours.
      absl::StatusOr<KeyValue> again = store->Get(kSecretKeyIdKey);
      if (!again.ok()) return again.status();
      if (again->value != id) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the secret key in ", path, " (key id ", id,
            ") is not the one another server of this cluster uses (key id ",
            again->value,
            "): give every server the same key file (--secret-key-file)"));
      }
    } else if (!r.ok()) {
      return r.status();
    }
  }
  out.key = *std::move(key);
  return out;
}

}  // namespace loom
