#pragma once

// The token an agent presents to a peer node for a dataset version it
// copies from the peer's cache (docs/datasets.md, "Peers"). The server
// derives it from the peer's agent key and puts it in the launch; the peer
// checks it against the SHA-256 of its key, which is all it keeps. It opens
// only `GET /v1/datasets/<version>/...` on that node.

#include <string>
#include <string_view>

#include "loom/common/digest.h"

namespace loom {

// From the SHA-256 (hex) of the peer's agent key.
inline std::string DatasetPeerTokenFromDigest(std::string_view key_digest,
                                              std::string_view version) {
  return HmacSha256Hex(key_digest,
                       std::string("loom-dataset:") + std::string(version));
}

// From the peer's agent key itself (the server's side).
inline std::string DatasetPeerToken(std::string_view key,
                                    std::string_view version) {
  return DatasetPeerTokenFromDigest(Sha256Hex(key), version);
}

}  // namespace loom
