#pragma once

// Unpacking image layers into a root filesystem (docs/images.md): each layer
// is a tar (gzip, zstd or plain: libarchive reads them all) applied over the
// layers below it, with OCI whiteouts. The unpacker resolves every path as if
// the root filesystem were `/` (openat2 RESOLVE_IN_ROOT), so nothing it writes
// lands outside it, whatever links the layers hold. Entries with an absolute
// path or a `..` component, and hard links to such paths, fail the layer.
// Setuid and setgid bits are dropped, device nodes and sockets skipped,
// extended attributes (file capabilities among them) not written. Owners
// are never taken from the tar: everything belongs to the unpacking process
// (root on a node), so that no uid of the layer (1000 is common) owns a
// shared image file on the host (docs/images.md, "Owners").

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom::image {

// Applies the layer archive at `layer_path` to the directory `rootfs`
// (which exists). `.wh.NAME` removes NAME from the layers below;
// `.wh..wh..opq` in a directory removes what the layers below put there.
// InvalidArgument naming the entry for an unsafe or unreadable one.
[[nodiscard]] absl::Status ApplyLayer(const std::string& layer_path,
                                      const std::string& rootfs);

// Takes the write bits off everything under `root` (links aside) and
// returns the bytes it occupies on disk.
[[nodiscard]] absl::StatusOr<int64_t> SealTree(const std::string& root);

// Removes `path` and everything under it, sealed or not. OK when absent.
[[nodiscard]] absl::Status RemoveTree(const std::string& path);

}  // namespace loom::image
