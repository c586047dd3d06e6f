#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

namespace loom {

// A dense set of node ids backed by 64-bit words. Iteration is in increasing
// id order, so anything built on it is deterministic.
class NodeMask {
 public:
  NodeMask() = default;
  explicit NodeMask(int size) : words_((size + 63) / 64, 0), size_(size) {}

  int size() const { return size_; }
  bool Contains(int n) const { return (words_[n >> 6] >> (n & 63)) & 1; }
  void Insert(int n) { words_[n >> 6] |= uint64_t{1} << (n & 63); }
  void Erase(int n) { words_[n >> 6] &= ~(uint64_t{1} << (n & 63)); }
  void Clear() { std::fill(words_.begin(), words_.end(), 0); }
  bool Empty() const {
    for (uint64_t w : words_) {
      if (w) return false;
    }
    return true;
  }
  // Adds the members of `other` (of the same size).
  void UnionWith(const NodeMask& other) {
    const size_t n = std::min(words_.size(), other.words_.size());
    for (size_t w = 0; w < n; ++w) words_[w] |= other.words_[w];
  }
  // Keeps only the members of `other` (of the same size).
  void IntersectWith(const NodeMask& other) {
    const size_t n = std::min(words_.size(), other.words_.size());
    for (size_t w = 0; w < n; ++w) words_[w] &= other.words_[w];
    std::fill(words_.begin() + n, words_.end(), 0);
  }
  bool operator==(const NodeMask&) const = default;
  int Count() const {
    int c = 0;
    for (uint64_t w : words_) c += std::popcount(w);
    return c;
  }

  // Calls `fn(node)` for each member in increasing order until it returns
  // false.
  template <typename Fn>
  void ForEachUntil(Fn&& fn) const {
    for (size_t w = 0; w < words_.size(); ++w) {
      uint64_t bits = words_[w];
      while (bits) {
        int b = std::countr_zero(bits);
        bits &= bits - 1;
        if (!fn(static_cast<int>(w * 64 + b))) return;
      }
    }
  }

  // Calls `fn(node)` for each node in both this mask and `other`, in
  // increasing order, until it returns false. Costs one word operation per
  // 64 nodes plus one call per common member.
  template <typename Fn>
  void ForEachInBothUntil(const NodeMask& other, Fn&& fn) const {
    const size_t n = std::min(words_.size(), other.words_.size());
    for (size_t w = 0; w < n; ++w) {
      uint64_t bits = words_[w] & other.words_[w];
      while (bits) {
        int b = std::countr_zero(bits);
        bits &= bits - 1;
        if (!fn(static_cast<int>(w * 64 + b))) return;
      }
    }
  }

 private:
  std::vector<uint64_t> words_;
  int size_ = 0;
};

}  // namespace loom
