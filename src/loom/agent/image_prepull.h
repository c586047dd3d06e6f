#pragma once

// A node's images as the server hears of them (docs/images.md, "Images on
// nodes"): the list its heartbeats carry when it changed, and the pulls the
// server asked for ahead of any task (`loom image pull`), each on a thread
// of its own, with their progress and, for one that failed, why.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "loom/agent/agent_log.h"
#include "loom/agent/task_state.h"
#include "loom/image/image_ref.h"
#include "loom/image/image_store.h"
#include "nlohmann/json.hpp"

namespace loom {

// The most images and pulls a heartbeat lists.
inline constexpr size_t kMaxReportedImages = 256;

// `store`'s images: [{digest, refs, bytes}], at most kMaxReportedImages
// (the most recently used first).
nlohmann::json NodeImagesJson(const image::ImageStore& store);

// Thread-safe.
class ImagePrepulls {
 public:
  ImagePrepulls(image::ImageStore* store, std::string node, const AgentLog& log)
      : store_(store), node_(std::move(node)), log_(log) {}
  ~ImagePrepulls();
  ImagePrepulls(const ImagePrepulls&) = delete;
  ImagePrepulls& operator=(const ImagePrepulls&) = delete;

  // Pulls `ref` (it has a digest) into the store, unless it is there or
  // being pulled: "present", "pulling" (started now or before). The pulled
  // image is kept like any other (evicted when unused, oldest first).
  std::string Start(const image::ImageRef& ref, const std::string& as_given);

  // The pulls in progress and the failures since their image was last
  // asked for: [{image, digest, state: pulling|failed, phase, bytes_done,
  // bytes_total, error}].
  nlohmann::json Json() const;
  // Whether Json() would say something: a pull runs or failed.
  bool Any() const;
  // Changes when a pull starts, ends or fails.
  uint64_t Generation() const { return generation_.load(); }

  // Waits for the pulls in progress (their registry's timeouts bound them).
  void Shutdown();

 private:
  struct Pull {
    std::string image;  // as given
    std::shared_ptr<ImagePullMeter> meter;
    bool running = true;
    std::string error;  // failed: why
    absl::Time ended = absl::InfinitePast();
  };

  image::ImageStore* const store_;
  const std::string node_;
  const AgentLog& log_;
  std::atomic<uint64_t> generation_{0};
  mutable absl::Mutex mu_;
  std::map<std::string, Pull> pulls_ ABSL_GUARDED_BY(mu_);  // by digest
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loom
