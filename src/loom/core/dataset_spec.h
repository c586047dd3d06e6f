#pragma once

// The `data:` field of a job spec (docs/datasets.md): datasets every task
// of a job reads, each a source in rclone's remote syntax (or an absolute
// local path) and the path the tasks see it at. Plain data plus the lexical
// checks; the remotes themselves are the operator's (`loom server
// --rclone-config FILE`), so a spec never carries credentials. Also the
// version of a dataset: a hash of its listing (pure, no I/O).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom {

// The most datasets one job may read.
inline constexpr size_t kMaxJobDatasets = 16;
// The longest source a spec may give.
inline constexpr size_t kMaxDatasetSourceLength = 1024;

struct DatasetSpec {
  // "REMOTE:PATH" (a remote of the operator's rclone config) or an absolute
  // local (or NFS) path, as written; for a named dataset, its source, which
  // the server sets at submit (empty until then).
  std::string source;
  // Absolute path, normalised, where each task sees a read-only copy.
  std::string mount;
  // A named dataset of the cluster (`loom dataset add NAME SOURCE`), or
  // empty.
  std::string name;

  bool operator==(const DatasetSpec&) const = default;
};

// Checks a source: "REMOTE:PATH" where REMOTE is a name of the operator's
// rclone config (letters, digits, '_', '-', '.', '+', '@' and spaces, not
// starting with '-' or a space) and PATH has no NUL or control characters,
// or an absolute local path. Refused, because they would put a backend's
// settings (credentials) into the spec: an on-the-fly remote
// (":s3:bucket", ":s3,access_key_id=...:") and a connection string
// ("remote,key=value:path"). InvalidArgument with the reason alone.
absl::Status CheckDatasetSource(std::string_view source);

// Checks a dataset's name: as a project's (`IsValidSpecId`: lower-case
// letters, digits, '-', '_' and '.', starting with a letter or digit, at
// most 63 characters). InvalidArgument with the reason alone.
absl::Status CheckDatasetName(std::string_view name);

// One file of a dataset's listing (`rclone lsjson -R`).
struct DatasetEntry {
  std::string path;  // relative to the source, '/'-separated
  int64_t size = 0;
  // The remote's checksum when it gives one ("md5:...", "sha1:..."), else
  // empty; `modtime` as the remote writes it (RFC 3339).
  std::string hash;
  std::string modtime;
};

// The version of a dataset of `source` with these files: the first 16 hex
// digits of SHA-256 over the source, then the entries sorted by path, each
// as path, size and its hash (its modtime when it has none). The same files
// give the same version in any order; a changed size, checksum or modtime
// gives another one, and so does another source with the same listing (a
// version names one source's files: a cache and a peer's token never mix
// two sources).
std::string DatasetVersion(std::string_view source,
                           std::vector<DatasetEntry> entries);

// Parses `rclone lsjson` output: a JSON array of {Path, Size, ModTime,
// IsDir, Hashes}. Directories are skipped; a file's hash is the first of
// its `Hashes` as "NAME:HEX" (names sorted). InvalidArgument for anything
// else.
absl::StatusOr<std::vector<DatasetEntry>> ParseRcloneLsjson(
    std::string_view text);

// An rclone error line without rclone's log prefix ("2026/01/02 03:04:05
// ERROR : " or "... Failed to ..."'s date): what rclone said, for a
// reason a person reads.
std::string RcloneErrorText(std::string_view line);

// True for what `DatasetVersion` returns (16 lower-case hex digits), so that
// a version can name a directory.
bool IsDatasetVersion(std::string_view version);

}  // namespace loom
