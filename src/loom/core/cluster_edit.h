#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/core/cluster.h"

namespace loom {

// `next` with the nodes named in `keep` as they are in `live`: the nodes a
// new cluster revision removes or changes while jobs still run on them, kept
// until those jobs have moved (`loom apply` drains them first). A kept node
// that `next` has too replaces next's in place (same pool, same place in
// the tree, `live`'s resources); one that `next` removed is appended, in
// its pool when `next` still has it (else in a copy of `live`'s pool,
// appended too), under a leaf switch of its own named "retiring" so that
// the tree stays valid. GPU models of kept nodes that `next` lacks are
// appended. Names in `keep` that `live` does not have are ignored; with
// none left the result is `next`.
absl::StatusOr<Cluster> KeepNodes(const Cluster& next, const Cluster& live,
                                  const std::vector<std::string>& keep);

}  // namespace loom
