#pragma once

// The prober of service replicas (docs/agent.md, "Service replicas"), the
// way the kubelet has a prober manager: the readiness and liveness probes
// of every task that has them, run by a few threads of its own so that a
// slow replica never holds up the agent's other work. It knows tasks only
// by the key `Add` gave them and tells their owner (the task runner) what
// it found through the callback it was given; it never touches a task.
//
// Each probe runs once per period, at most one at a time per probe (the
// next is due a period after the last one started, or when it returned if
// that is later), and gives up at its timeout. With more probes due than
// threads, they wait their turn.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "loom/agent/probe_spec.h"

namespace loom {

// What to probe: the task's address, its probes, and when it started (the
// probes' initial delays count from it).
struct ProbeTarget {
  std::string host;
  int port = 0;
  std::optional<ProbeSpec> readiness;
  std::optional<ProbeSpec> liveness;
  absl::Time started = absl::InfinitePast();
};

// One result, as the task's owner hears it.
struct ProbeReport {
  enum class Kind { kReadiness, kLiveness };
  uint64_t key = 0;
  Kind kind = Kind::kReadiness;
  // Readiness: whether the task is ready now (false until the first
  // success; true after a success; false after `failures` failures in a
  // row).
  bool ready = false;
  // Liveness: `failures` failures in a row. The task's probes are then
  // removed: nothing more is reported for it.
  bool failed = false;
  int failures = 0;     // failures in a row, this one included
  std::string message;  // the last failure, "" after a success
};

// Runs one probe: OK for a pass. Must give up by `spec.timeout`, and soon
// after `cancel` holds.
using ProbeCheck = std::function<absl::Status(const std::string& host, int port,
                                              const ProbeSpec& spec,
                                              const std::atomic<bool>& cancel)>;

struct ProbeRunnerOptions {
  // Threads at most (one per registered probe up to this many, made as
  // probes are added).
  int threads = 8;
  // Null: `HttpGetProbe`.
  ProbeCheck check;
};

// Thread-safe. The callbacks run on the prober's threads with no lock of
// the prober held; they may call `Remove`, not `Shutdown`.
class ProbeRunner {
 public:
  using Report = std::function<void(const ProbeReport&)>;

  explicit ProbeRunner(ProbeRunnerOptions options);
  // Shuts down (see `Shutdown`).
  ~ProbeRunner();
  ProbeRunner(const ProbeRunner&) = delete;
  ProbeRunner& operator=(const ProbeRunner&) = delete;

  // Lets the probes run: before it, `Add` registers them but no thread
  // runs them. Idempotent.
  void Start();

  // Cancels the probes in flight (they return within about 100 ms) and
  // joins the threads. Probes added later never run. Idempotent.
  void Shutdown();

  // Registers `target`'s probes (none: nothing to do, returns 0); results
  // go to `report`. Returns the key that names them in reports and
  // `Remove`.
  uint64_t Add(ProbeTarget target, Report report);

  // Unregisters `key` (a no-op for an unknown one) and cancels its probe in
  // flight. Does not wait for it: a report of that probe may still arrive
  // after this returns, so the callback checks that the key is still its
  // task's.
  void Remove(uint64_t key);

  // Registered tasks, and threads made (tests).
  size_t size() const;
  size_t threads() const;

 private:
  struct Probe {
    ProbeSpec spec;
    absl::Time due;
    bool in_flight = false;
    int failures = 0;
    bool ready = false;
    std::shared_ptr<std::atomic<bool>> cancel;
  };
  struct Entry {
    std::string host;
    int port = 0;
    std::optional<Probe> probes[2];  // by `ProbeReport::Kind`
    Report report;
  };
  // (due, key, kind) of each probe that is not in flight.
  using DueSet = std::set<std::tuple<absl::Time, uint64_t, int>>;

  void Work();
  void EraseLocked(uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void GrowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the result of a probe to it; the report to send.
  static ProbeReport Update(uint64_t key, int kind, Probe& probe,
                            const absl::Status& result);

  const ProbeRunnerOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  std::map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  DueSet due_ ABSL_GUARDED_BY(mu_);
  size_t probes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_key_ ABSL_GUARDED_BY(mu_) = 1;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loom
