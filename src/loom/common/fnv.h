#pragma once

// FNV-1a, 64 bits: a fast, stable, non-cryptographic hash of short text,
// for names and emulated identifiers that must come out the same on every
// run (never for anything an attacker may choose to collide); and the
// emulated devices' UUIDs made from it.

#include <cstdint>
#include <cstdio>
#include <string>
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

// A stable UUID-shaped name for emulated hardware: `prefix` ("GPU",
// "MIG"), then two FNV-1a hashes of `key` (seeded `seed_a`, `seed_b`) in the
// 8-4-4-4-12 hex form NVML gives real devices ("GPU-1a2b...-...").
inline std::string EmulatedUuid(std::string_view prefix, std::string_view key,
                                uint64_t seed_a, uint64_t seed_b) {
  const uint64_t a = Fnv1a64(key, seed_a);
  const uint64_t b = Fnv1a64(key, seed_b);
  char text[64];
  std::snprintf(
      text, sizeof(text), "-%08x-%04x-%04x-%04x-%012llx",
      static_cast<unsigned>(a >> 32), static_cast<unsigned>((a >> 16) & 0xffff),
      static_cast<unsigned>(a & 0xffff), static_cast<unsigned>(b >> 48),
      static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return std::string(prefix) + text;
}

}  // namespace loom
