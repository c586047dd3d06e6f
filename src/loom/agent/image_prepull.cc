#include "loom/agent/image_prepull.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "loom/agent/json_values.h"

namespace loom {
namespace {

using json = nlohmann::json;

// The most failed pulls remembered (the oldest go first).
constexpr size_t kMaxFailedPulls = 16;

constexpr const char* kPullPhases[] = {"manifest", "layers", "unpacking",
                                       "done"};

}  // namespace

json NodeImagesJson(const image::ImageStore& store) {
  std::vector<image::ImageInfo> images = store.List();
  std::sort(images.begin(), images.end(),
            [](const image::ImageInfo& a, const image::ImageInfo& b) {
              return a.last_used > b.last_used;
            });
  json out = json::array();
  for (const image::ImageInfo& i : images) {
    if (out.size() >= kMaxReportedImages) break;
    json refs = json::array();
    for (const std::string& r : i.refs) {
      if (refs.size() >= 8) break;
      refs.push_back(r);
    }
    out.push_back({{"digest", i.digest}, {"refs", refs}, {"bytes", i.bytes}});
  }
  return out;
}

ImagePrepulls::~ImagePrepulls() { Shutdown(); }

void ImagePrepulls::Shutdown() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    threads = std::move(threads_);
    threads_.clear();
  }
  for (std::thread& t : threads) t.join();
}

std::string ImagePrepulls::Start(const image::ImageRef& ref,
                                 const std::string& as_given) {
  if (absl::StatusOr<image::ImageHandle> held = store_->Acquire(ref.digest);
      held.ok()) {
    store_->Release(ref.digest);
    return "present";
  }
  auto meter = std::make_shared<ImagePullMeter>();
  meter->image = as_given;
  meter->started = absl::Now();
  absl::MutexLock lock(&mu_);
  if (auto it = pulls_.find(ref.digest);
      it != pulls_.end() && it->second.running) {
    return "pulling";
  }
  pulls_[ref.digest] = Pull{as_given, meter};
  ++generation_;
  log_("info", node_, absl::StrCat("pulling image ", as_given, " (asked)"));
  threads_.emplace_back([this, ref, meter] {
    absl::StatusOr<image::ImageHandle> handle =
        store_->Ensure(ref, [&meter](const image::PullProgress& p) {
          meter->phase.store(static_cast<int>(p.phase));
          meter->bytes_done.store(p.bytes_done);
          meter->bytes_total.store(p.bytes_total);
        });
    if (handle.ok()) store_->Release(ref.digest);
    const absl::Duration took = absl::Now() - meter->started;
    absl::MutexLock lock(&mu_);
    auto it = pulls_.find(ref.digest);
    if (it == pulls_.end() || it->second.meter != meter) return;
    if (handle.ok()) {
      log_("info", node_,
           absl::StrCat(
               "pulled image ", it->second.image, " in ",
               absl::FormatDuration(absl::Trunc(took, absl::Milliseconds(1)))));
      pulls_.erase(it);
    } else {
      it->second.running = false;
      it->second.error = Str(handle.status().message());
      it->second.ended = absl::Now();
      log_("warn", node_,
           absl::StrCat("pulling image ", it->second.image,
                        " failed: ", it->second.error));
      // Remember the latest failures only.
      while (true) {
        size_t failed = 0;
        auto oldest = pulls_.end();
        for (auto p = pulls_.begin(); p != pulls_.end(); ++p) {
          if (p->second.running) continue;
          ++failed;
          if (oldest == pulls_.end() || p->second.ended < oldest->second.ended)
            oldest = p;
        }
        if (failed <= kMaxFailedPulls) break;
        pulls_.erase(oldest);
      }
    }
    ++generation_;
  });
  return "pulling";
}

bool ImagePrepulls::Any() const {
  absl::MutexLock lock(&mu_);
  return !pulls_.empty();
}

json ImagePrepulls::Json() const {
  json out = json::array();
  absl::MutexLock lock(&mu_);
  for (const auto& [digest, p] : pulls_) {
    if (out.size() >= kMaxReportedImages) break;
    const int phase = p.meter->phase.load();
    json j = {{"image", p.image},
              {"digest", digest},
              {"state", p.running ? "pulling" : "failed"},
              {"phase", kPullPhases[phase >= 0 && phase < 4 ? phase : 0]},
              {"bytes_done", p.meter->bytes_done.load()},
              {"bytes_total", p.meter->bytes_total.load()}};
    if (!p.running) j["error"] = p.error;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace loom
