#pragma once

// The gateway's run directory (docs/services.md, "Gateway"): haproxy.cfg,
// HAProxy's sockets (master.sock, admin.sock), the access log socket
// (log.sock) and haproxy.log. A root gateway runs HAProxy as root, and
// HAProxy reads haproxy.cfg again at every reload, so whoever can write in
// this directory, or replace it, runs code as root (a `lua-load` line).
//
// So the directory is opened once and kept open: it must be owned by the
// gateway's effective uid and have mode 0700, it must not be a symlink,
// and every directory above it must be owned by root or that uid and be
// writable by nobody else (or sticky, as /tmp), so that no other user can
// plant it, enter it, or swap it or an ancestor for another later (the
// path HAProxy is given, the walked one with symlinks resolved, stays
// this directory's). Files are written relative to the held descriptor
// with O_NOFOLLOW, temporaries with O_CREAT|O_EXCL after removing a stale
// one (never through a symlink), and renamed into place with renameat.
//
// Thread-compatible; the descriptor is constant after `Open`.

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom::gateway {

class RunDir {
 public:
  // Opens the run directory at `path` (made absolute against the working
  // directory), walking it component by component from "/" without letting
  // the kernel follow a symlink: a symlink above the run directory is
  // followed only when root or this process's effective uid owns it, and
  // every directory on the way must be owned by root or that uid and be
  // writable by no one else unless sticky. The run directory itself must
  // not be a symlink, must be owned by that uid and have mode 0700. With
  // `create`, missing components are made (mode 0700 whatever the umask,
  // owned by the caller). Errors: InvalidArgument for "/" or an empty path;
  // NotFound for a missing directory without `create`; FailedPrecondition,
  // naming the path and what to do, for anything the checks refuse.
  static absl::StatusOr<std::shared_ptr<const RunDir>> Open(std::string path,
                                                            bool create);

  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  // The canonical absolute path (what HAProxy is given).
  const std::string& path() const { return path_; }
  // "<path>/<name>".
  std::string PathOf(std::string_view name) const;
  // The directory's descriptor (O_RDONLY|O_DIRECTORY), owned by this.
  int fd() const { return fd_; }

  // In every call below `name` is one file name in the directory (no '/',
  // not "." or ".."); InvalidArgument otherwise.

  // Writes `contents` to `name` whole or not at all: a stale "<name>.tmp"
  // is removed (unlinkat, whatever it is: a symlink is not followed), the
  // temporary created with O_CREAT|O_EXCL|O_NOFOLLOW and `mode`, written,
  // synced and renamed over `name` (a symlink there is replaced, not
  // followed), and the directory synced. Errors follow errno and name the
  // file and the step.
  absl::Status WriteFile(std::string_view name, std::string_view contents,
                         mode_t mode = 0600) const;

  // Opens `name` for appending (O_APPEND|O_NOFOLLOW|O_CLOEXEC), creating it
  // with mode 0600. The caller owns the descriptor. FailedPrecondition
  // when `name` is a symlink, not a regular file, not owned by this
  // process's effective uid, or has another hard link (it may be another
  // file's): nothing is written then.
  absl::StatusOr<int> OpenAppend(std::string_view name) const;

  // The last `max_bytes` of the regular file `name`, read without
  // following a symlink; "" when it is missing, a symlink or unreadable.
  std::string Tail(std::string_view name, size_t max_bytes) const;

  // Removes `name` (unlinkat: a symlink itself, never its target). OK when
  // it does not exist.
  absl::Status Remove(std::string_view name) const;

  // Whether an entry `name` exists (a dangling symlink counts).
  bool Exists(std::string_view name) const;

 private:
  RunDir(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  // Constant after construction.
  const std::string path_;
  const int fd_;
};

// Where `loom gateway` keeps its run directory when not given one, for a
// gateway named `name` run with effective uid `euid`: as root,
// "/run/loom-gateway/<name>" (the parent made 0700 by the gateway); else
// "<xdg_runtime_dir>/loom-gateway-<name>" when `xdg_runtime_dir` is an
// absolute path (the user's own 0700 directory), else
// "<tmpdir>/loom-gateway-<name>" ("/tmp" when `tmpdir` is not absolute),
// which `RunDir::Open` then makes 0700 or refuses when another user made
// it. InvalidArgument when `name` cannot be a file name (empty, "." or
// "..", a '/', a control character, or longer than 64 bytes): pass the
// run directory with a flag then.
absl::StatusOr<std::string> DefaultRunDir(uid_t euid, std::string_view name,
                                          std::string_view xdg_runtime_dir,
                                          std::string_view tmpdir);

}  // namespace loom::gateway
