#pragma once

// FNV-1a, 64 bits: a fast, stable, non-cryptographic hash of short text,
// for names and emulated identifiers that must come out the same on every
// run (never for anything an attacker may choose to collide).

#include <cstdint>
#include <string_view>

namespace loom {

// The hash of `text`, starting from the FNV offset basis xor `seed` (0: the
// plain FNV-1a).
inline uint64_t Fnv1a64(std::string_view text, uint64_t seed = 0) {
  uint64_t h = 1469598103934665603ULL ^ seed;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace loom
