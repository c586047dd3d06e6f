#pragma once

// The agent's structured log lines: `TIME level=LEVEL [node=NODE]
// msg="MESSAGE"`, to a sink the caller gives or to standard error.

#include <functional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace loom {

// Thread-safe: lines from several threads never interleave.
class AgentLog {
 public:
  // `sink` receives each formatted line; null: standard error.
  explicit AgentLog(std::function<void(const std::string& line)> sink)
      : sink_(std::move(sink)) {}

  // `node` may be empty (a line about the whole agent).
  void operator()(std::string_view level, std::string_view node,
                  const std::string& message) const;

 private:
  const std::function<void(const std::string&)> sink_;
  mutable absl::Mutex mu_;
};

}  // namespace loom
