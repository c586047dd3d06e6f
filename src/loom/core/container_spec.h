#pragma once

// The `container:` field of a job spec (docs/job-spec.md, docs/images.md):
// the image a job's tasks run in, the host directories bound into it, and
// how the image's own settings are overridden. Plain data plus the lexical
// checks that need no registry and no file system; the full reference
// grammar is `loom::image::ParseImageRef`, which the server applies (core
// does not depend on src/loom/image).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom {

// The longest image reference a spec may carry (the Distribution grammar
// allows a 255-character name, a 128-character tag and a digest).
inline constexpr size_t kMaxImageRefLength = 512;
// The longest path a spec may give (a working or container directory).
inline constexpr size_t kMaxPathLength = 4096;
// The most mounts one job may ask for.
inline constexpr size_t kMaxContainerMounts = 64;

// One host directory bound into every task's container.
struct ContainerMount {
  std::string source;       // absolute host path, normalised
  std::string destination;  // absolute path inside the container, normalised
  bool readonly = false;

  bool operator==(const ContainerMount&) const = default;
};

struct ContainerSpec {
  // The reference as written: host:5000/team/train:1.4 or ...@sha256:<hex>.
  std::string image;
  // "sha256:<64 hex>": set by the server at submit (empty until then); what
  // every task and every restart of the job runs.
  std::string image_digest;
  std::vector<ContainerMount> mounts;
  // Absolute, or empty: the image's WorkingDir, else "/". The job spec's
  // `working_dir` (a host path) cannot be given with a container.
  std::string workdir;
  // Not set: the image's Entrypoint, with `command` as its arguments. Set
  // and empty (`entrypoint: []`): no entrypoint, `command` runs as it is.
  // Set: this entrypoint instead of the image's. The image's Cmd is never
  // used: a job spec always has a `command`.
  std::optional<std::vector<std::string>> entrypoint;
  // A per-task writable layer over the read-only image root.
  bool writable = false;
  // The size of /dev/shm; 0: the task's memory_per_task when set, else the
  // tmpfs default of half the node's memory (the agent decides).
  int64_t shm_size_bytes = 0;

  bool operator==(const ContainerSpec&) const = default;
};

// Lexically normalises an absolute path: repeated and trailing '/' and "."
// components go; "/" stays "/". InvalidArgument (the reason alone, no field
// name) for an empty or relative path, a ".." component, a NUL or a path
// longer than 4096 bytes. No file system access: symbolic links are the
// caller's concern.
absl::StatusOr<std::string> NormalizeAbsolutePath(std::string_view path);

// True when normalised path `path` is `dir` or lies under it ("/data/x" is
// under "/data"; "/database" is not).
bool PathIsUnder(std::string_view path, std::string_view dir);

// Parses a mount as pyxis and docker write it: "SRC:DST" (read-write),
// "SRC:DST:ro" or "SRC:DST:rw". Both paths absolute and normalised; the
// destination is not "/" and not under /proc, /sys or /dev (the runtime
// makes those). InvalidArgument with the reason alone ("destination must be
// an absolute path, got 'x'").
absl::StatusOr<ContainerMount> ParseContainerMount(std::string_view text);

// The mount as `ParseContainerMount` reads it: "SRC:DST" or "SRC:DST:ro".
std::string ContainerMountText(const ContainerMount& mount);

// True for "sha256:" followed by 64 lower-case hex digits.
bool IsSha256DigestText(std::string_view digest);

// Checks each mount's source against the host directories a cluster allows
// (`Cluster::containers.allowed_mounts`, normalised): it must be one of them
// or under one. InvalidArgument naming the field, e.g.
// "container.mounts[1]: '/etc' is not under a directory the cluster allows
// to be mounted (/data, /scratch)"; with none allowed, every mount is
// refused saying so.
absl::Status CheckContainerMounts(const ContainerSpec& spec,
                                  const std::vector<std::string>& allowed);

// True for a registry as an image reference starts with: "host" or
// "host:port", the host a domain name or an IPv4 address (dot-separated
// letters, digits and inner '-') or "[IPv6]", the port 1 to 65535.
bool IsRegistryHostPort(std::string_view registry);

// Checks an image's registry (`host[:port]`, as its reference names it)
// against the registries a cluster allows
// (`Cluster::containers.allowed_registries`, lower-case): the host compared
// without regard to case, the port exactly (an entry without one allows
// references without one only). Empty `allowed`: every registry. Else
// InvalidArgument naming the field, e.g. "container.image: registry
// 'evil:22' is not one this cluster takes images from
// (containers.allowed_registries: registry.example.com:5000)".
absl::Status CheckContainerRegistry(std::string_view registry,
                                    const std::vector<std::string>& allowed);

}  // namespace loom
