#pragma once

// The server's secrets on disk (docs/security.md): its data dir, readable
// by the server's user only, and the cluster's secret key file, from which
// agent keys and job tokens derive (server/auth.h).

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/store/state_store.h"

namespace loom {

// Makes `dir` (mode 0700, parents as needed) if it does not exist; then
// refuses (FailedPrecondition, naming the path, its mode and the fix) a
// `dir` that group or others may use (any of the 077 bits), or a regular
// file directly in it that group or others may read or write (state.db and
// its -wal, -shm, -journal, admin.token, secret.key, ...). Subdirectories
// (checkpoints) are not looked into.
absl::Status PrepareDataDir(const std::string& dir);

// Refuses (FailedPrecondition, naming path and mode) an existing `path` that
// is not a regular file or that group or others may read or write; OK for a
// path that does not exist.
absl::Status CheckPrivateFile(const std::string& path);

// Creates `path` empty with mode 0600 if it does not exist (so that SQLite,
// which gives a database's -wal, -shm and -journal files the database's
// mode, makes them 0600 too). Existing files are left alone.
absl::Status CreatePrivateFile(const std::string& path);

// What `LoadSecretKey` did besides reading the key, for the log ("" when
// nothing is worth saying).
struct SecretKeyLoad {
  std::string key;   // 64 hex digits
  std::string note;  // "made a new secret key in ...", "moved ..."
};

// The cluster's secret key, kept in `path` (mode 0600, 64 hex digits and a
// newline), never in the store. Every server of a cluster must use the same
// file (`--secret-key-file`); the store keeps only the key's id (an HMAC of
// a constant, `/auth/secret-key-id`), so that a server with another key
// refuses to start instead of handing out credentials nobody accepts.
//
// - `path` exists: it is checked (`CheckPrivateFile`, the format) and used.
// - A store of an older loom holds the secret in clear at
//   `/auth/cluster-secret`: it is moved to `path` (written first, then
//   deleted from the store), and the note says so.
// - Neither, on a store whose credentials were made with a key (it has a
//   key id): FailedPrecondition (copy the key file from another server).
// - Neither, on a new store: a new key is made. Two servers starting at once
//   on one shared file agree: the file is created exclusively.
absl::StatusOr<SecretKeyLoad> LoadSecretKey(const std::string& path,
                                            StateStore* store);

}  // namespace loom
