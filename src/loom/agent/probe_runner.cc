#include "loom/agent/probe_runner.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "loom/agent/http_probe.h"
#include "loom/agent/json_values.h"

namespace loom {
namespace {

constexpr int kReadinessSlot = static_cast<int>(ProbeReport::Kind::kReadiness);
constexpr int kLivenessSlot = static_cast<int>(ProbeReport::Kind::kLiveness);

absl::Status HttpProbeCheck(const std::string& host, int port,
                            const ProbeSpec& spec,
                            const std::atomic<bool>& cancel) {
  return HttpGetProbe(host, port, spec.http, spec.timeout, &cancel);
}

ProbeRunnerOptions WithDefaultCheck(ProbeRunnerOptions options) {
  if (!options.check) options.check = HttpProbeCheck;
  options.threads = std::max(options.threads, 1);
  return options;
}

}  // namespace

ProbeRunner::ProbeRunner(ProbeRunnerOptions options)
    : options_(WithDefaultCheck(std::move(options))) {}

ProbeRunner::~ProbeRunner() { Shutdown(); }

void ProbeRunner::Start() {
  absl::MutexLock lock(&mu_);
  started_ = true;
  GrowLocked();
  changed_.SignalAll();
}

void ProbeRunner::Shutdown() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [key, entry] : entries_) {
      for (std::optional<Probe>& p : entry.probes) {
        if (p && p->cancel != nullptr) p->cancel->store(true);
      }
    }
    threads = std::move(threads_);
    threads_.clear();
    changed_.SignalAll();
  }
  for (std::thread& t : threads) t.join();
}

uint64_t ProbeRunner::Add(ProbeTarget target, Report report) {
  if (!target.readiness && !target.liveness) return 0;
  absl::MutexLock lock(&mu_);
  const uint64_t key = next_key_++;
  Entry entry;
  entry.host = std::move(target.host);
  entry.port = target.port;
  entry.report = std::move(report);
  const absl::Time now = absl::Now();
  for (const auto& [slot, spec] :
       {std::pair{kReadinessSlot, &target.readiness},
        std::pair{kLivenessSlot, &target.liveness}}) {
    if (!*spec) continue;
    Probe p;
    p.spec = **spec;
    // The first probe after the initial delay, counted from the task's
    // start (for a task recovered after an agent restart, mostly past).
    p.due = target.started == absl::InfinitePast()
                ? now + p.spec.initial_delay
                : std::max(now, target.started + p.spec.initial_delay);
    due_.insert({p.due, key, slot});
    entry.probes[slot] = std::move(p);
    ++probes_;
  }
  entries_.emplace(key, std::move(entry));
  GrowLocked();
  changed_.SignalAll();
  return key;
}

void ProbeRunner::Remove(uint64_t key) {
  absl::MutexLock lock(&mu_);
  EraseLocked(key);
  changed_.SignalAll();
}

size_t ProbeRunner::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

size_t ProbeRunner::threads() const {
  absl::MutexLock lock(&mu_);
  return threads_.size();
}

void ProbeRunner::EraseLocked(uint64_t key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  for (int slot : {kReadinessSlot, kLivenessSlot}) {
    std::optional<Probe>& p = it->second.probes[slot];
    if (!p) continue;
    --probes_;
    if (p->in_flight) {
      if (p->cancel != nullptr) p->cancel->store(true);
    } else {
      due_.erase({p->due, key, slot});
    }
  }
  entries_.erase(it);
}

void ProbeRunner::GrowLocked() {
  if (!started_ || stopping_) return;
  const size_t want = std::min(probes_, static_cast<size_t>(options_.threads));
  while (threads_.size() < want) threads_.emplace_back([this] { Work(); });
}

ProbeReport ProbeRunner::Update(uint64_t key, int kind, Probe& probe,
                                const absl::Status& result) {
  ProbeReport r;
  r.key = key;
  r.kind = static_cast<ProbeReport::Kind>(kind);
  if (result.ok()) {
    probe.failures = 0;
    probe.ready = true;
  } else {
    ++probe.failures;
    r.message = Str(result.message());
    if (probe.failures >= probe.spec.failures) {
      probe.ready = false;
      r.failed = kind == kLivenessSlot;
    }
  }
  r.ready = probe.ready;
  r.failures = probe.failures;
  return r;
}

void ProbeRunner::Work() {
  mu_.Lock();
  while (!stopping_) {
    if (due_.empty()) {
      changed_.Wait(&mu_);
      continue;
    }
    const auto [due, key, slot] = *due_.begin();
    if (due > absl::Now()) {
      changed_.WaitWithDeadline(&mu_, due);
      continue;
    }
    due_.erase(due_.begin());
    Entry& entry = entries_.at(key);
    Probe& probe = *entry.probes[slot];
    probe.in_flight = true;
    probe.cancel = std::make_shared<std::atomic<bool>>(false);
    const std::shared_ptr<std::atomic<bool>> cancel = probe.cancel;
    const std::string host = entry.host;
    const int port = entry.port;
    const ProbeSpec spec = probe.spec;
    mu_.Unlock();

    const absl::Time began = absl::Now();
    const absl::Status result = options_.check(host, port, spec, *cancel);

    mu_.Lock();
    auto it = entries_.find(key);
    // Removed (the task ended) or shut down meanwhile: nobody to tell.
    if (it == entries_.end() || stopping_ || cancel->load()) continue;
    Probe& done = *it->second.probes[slot];
    done.in_flight = false;
    done.cancel = nullptr;
    const ProbeReport report = Update(key, slot, done, result);
    const Report tell = it->second.report;
    if (report.failed) {
      EraseLocked(key);
    } else {
      done.due = std::max(began + done.spec.period, absl::Now());
      due_.insert({done.due, key, slot});
    }
    changed_.SignalAll();
    mu_.Unlock();
    if (tell) tell(report);
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace loom
