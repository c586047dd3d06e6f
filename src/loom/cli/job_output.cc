#include "loom/cli/job_output.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace loom {

std::string LinePrefixer::Feed(std::string_view chunk) {
  std::string out;
  size_t start = 0;
  while (true) {
    const size_t nl = chunk.find('\n', start);
    if (nl == std::string_view::npos) break;
    out.append(prefix_).append(partial_).append(chunk.substr(start, nl + 1 - start));
    partial_.clear();
    start = nl + 1;
  }
  partial_.append(chunk.substr(start));
  return out;
}

std::string LinePrefixer::Flush() {
  if (partial_.empty()) return "";
  std::string out = absl::StrCat(prefix_, partial_, "\n");
  partial_.clear();
  return out;
}

JobOutputFollower::JobOutputFollower(ClientFactory make_client, int64_t job,
                                     bool label, std::ostream& out,
                                     std::ostream& err)
    : label_(label), shared_(std::make_shared<Shared>()) {
  shared_->make_client = std::move(make_client);
  shared_->job = job;
  shared_->out = &out;
  shared_->err = &err;
}

JobOutputFollower::~JobOutputFollower() { Finish(absl::ZeroDuration()); }

void JobOutputFollower::Follow(const nlohmann::json& job) {
  const nlohmann::json* tasks = nullptr;
  if (auto p = job.find("placement"); p != job.end() && p->is_object()) {
    if (auto t = p->find("tasks"); t != p->end() && t->is_array()) {
      tasks = &*t;
    }
  }
  if (tasks == nullptr) return;
  int processes = 1;
  if (auto spec = job.find("spec"); spec != job.end() && spec->is_object()) {
    if (auto r = spec->find("resources"); r != spec->end() && r->is_object()) {
      if (auto p = r->find("processes_per_task");
          p != r->end() && p->is_number_integer() && p->get<int>() > 0) {
        processes = p->get<int>();
      }
    }
  }
  for (const nlohmann::json& t : *tasks) {
    if (!t.is_object() || !t.contains("task_id") || !t["task_id"].is_string() ||
        !t.contains("index") || !t["index"].is_number_integer()) {
      continue;
    }
    const std::string id = t["task_id"].get<std::string>();
    // A launching task has no output yet, and its agent may refuse it.
    const std::string state = t.value("state", "");
    if (state == "launching" || !followed_.insert(id).second) continue;
    const int index = t["index"].get<int>();
    for (int p = 0; p < processes; ++p) {
      for (const char* stream : {"stdout", "stderr"}) {
        LogRequest req;
        req.task = index;
        req.process = p;
        req.stream = stream;
        req.follow = true;
        auto s = std::make_shared<Stream>();
        const std::string prefix =
            label_ ? absl::StrCat(index * processes + p, ": ") : "";
        s->thread = std::thread(Run, shared_, s, req, prefix);
        streams_.push_back(std::move(s));
      }
    }
  }
}

void JobOutputFollower::Run(std::shared_ptr<Shared> shared,
                            std::shared_ptr<Stream> stream, LogRequest request,
                            std::string prefix) {
  std::ostream& to = request.stream == "stderr" ? *shared->err : *shared->out;
  LinePrefixer lines(std::move(prefix));
  // False once the follower gave up on this stream.
  auto write = [&](const std::string& text) {
    std::lock_guard<std::mutex> lock(shared->mu);
    if (shared->abandoned) return false;
    if (!text.empty()) to << text << std::flush;
    return true;
  };
  std::unique_ptr<ApiClient> client = shared->make_client();
  if (client != nullptr) {
    (void)client->StreamLogs(shared->job, request, [&](std::string_view chunk) {
      return write(lines.Feed(chunk));
    });
  }
  write(lines.Flush());
  stream->done.store(true);
}

bool JobOutputFollower::Finish(absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  bool all = true;
  for (const auto& s : streams_) {
    while (!s->done.load() && absl::Now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    all &= s->done.load();
  }
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->abandoned = true;
  }
  for (auto& s : streams_) {
    if (!s->thread.joinable()) continue;
    // A stream the server never ends is left to end with the process; it
    // writes nothing more.
    if (s->done.load()) {
      s->thread.join();
    } else {
      s->thread.detach();
    }
  }
  streams_.clear();
  return all;
}

}  // namespace loom
