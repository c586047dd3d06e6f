// The prober (probe_runner.h) with a check the test controls: readiness
// false, true, false again; liveness failing; one probe in flight per
// probe; initial delays; removal and shutdown cancelling probes in flight;
// a bounded number of threads. And the HTTP probe itself (http_probe.h)
// against loopback servers that answer, fail, redirect, say nothing, or
// are not there.

#include "loom/agent/probe_runner.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/http_probe.h"

namespace loom {
namespace {

using agent_testing::WaitFor;
using ::testing::HasSubstr;

ProbeSpec FastProbeSpec(int failures = 2) {
  ProbeSpec p;
  p.http = "/healthz";
  p.period = absl::Milliseconds(100);
  p.timeout = absl::Milliseconds(100);
  p.failures = failures;
  return p;
}

// ProbeReports of one registration, as the runner's callback gets them.
class ProbeReports {
 public:
  ProbeRunner::Report callback() {
    return [this](const ProbeReport& r) {
      absl::MutexLock lock(&mu_);
      all_.push_back(r);
    };
  }
  std::vector<ProbeReport> all() const {
    absl::MutexLock lock(&mu_);
    return all_;
  }
  std::optional<ProbeReport> last(ProbeReport::Kind kind) const {
    absl::MutexLock lock(&mu_);
    for (auto it = all_.rbegin(); it != all_.rend(); ++it) {
      if (it->kind == kind) return *it;
    }
    return std::nullopt;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<ProbeReport> all_ ABSL_GUARDED_BY(mu_);
};

TEST(ProbeRunnerTest, ReadinessGoesFalseTrueFalse) {
  std::atomic<bool> healthy{false};
  std::atomic<int> calls{0};
  ProbeRunnerOptions options;
  options.check = [&](const std::string& host, int port, const ProbeSpec& s,
                      const std::atomic<bool>&) {
    ++calls;
    EXPECT_EQ(host, "127.0.0.1");
    EXPECT_EQ(port, 20001);
    EXPECT_EQ(s.http, "/healthz");
    return healthy.load()
               ? absl::OkStatus()
               : absl::UnavailableError("GET /healthz: answered 503");
  };
  ProbeRunner runner(options);
  ProbeReports reports;
  const uint64_t key = runner.Add(
      {"127.0.0.1", 20001, FastProbeSpec(2), std::nullopt, absl::Now()},
      reports.callback());
  ASSERT_NE(key, 0u);
  // Not started: nothing runs.
  absl::SleepFor(absl::Milliseconds(150));
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(runner.threads(), 0u);
  runner.Start();
  ASSERT_TRUE(WaitFor([&] { return calls.load() >= 2; }));
  std::optional<ProbeReport> r = reports.last(ProbeReport::Kind::kReadiness);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->key, key);
  EXPECT_FALSE(r->ready);
  EXPECT_EQ(r->message, "GET /healthz: answered 503");
  healthy = true;
  ASSERT_TRUE(WaitFor([&] {
    std::optional<ProbeReport> l = reports.last(ProbeReport::Kind::kReadiness);
    return l && l->ready;
  }));
  EXPECT_EQ(reports.last(ProbeReport::Kind::kReadiness)->message, "");
  // One failure is not enough (failures: 2); two in a row are.
  healthy = false;
  ASSERT_TRUE(WaitFor([&] {
    std::optional<ProbeReport> l = reports.last(ProbeReport::Kind::kReadiness);
    return l && !l->ready;
  }));
  bool saw_one_failure_still_ready = false;
  for (const ProbeReport& rep : reports.all()) {
    if (rep.failures == 1 && rep.ready) saw_one_failure_still_ready = true;
    EXPECT_FALSE(rep.failed);  // readiness never "fails" the task
  }
  EXPECT_TRUE(saw_one_failure_still_ready);
  runner.Remove(key);
  EXPECT_EQ(runner.size(), 0u);
}

TEST(ProbeRunnerTest, LivenessFailsAfterItsFailuresAndIsDropped) {
  std::atomic<int> calls{0};
  ProbeRunnerOptions options;
  options.check = [&](const std::string&, int, const ProbeSpec&,
                      const std::atomic<bool>&) {
    ++calls;
    return absl::UnavailableError("GET /healthz: answered 500");
  };
  ProbeRunner runner(options);
  runner.Start();
  ProbeReports reports;
  runner.Add({"127.0.0.1", 20002, std::nullopt, FastProbeSpec(3), absl::Now()},
             reports.callback());
  ASSERT_TRUE(WaitFor([&] {
    std::optional<ProbeReport> l = reports.last(ProbeReport::Kind::kLiveness);
    return l && l->failed;
  }));
  const std::optional<ProbeReport> failed =
      reports.last(ProbeReport::Kind::kLiveness);
  EXPECT_EQ(failed->failures, 3);
  EXPECT_EQ(failed->message, "GET /healthz: answered 500");
  EXPECT_EQ(runner.size(), 0u);
  const int after = calls.load();
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(calls.load(), after);  // no probe after the verdict
  EXPECT_EQ(after, 3);
}

TEST(ProbeRunnerTest, OneProbeInFlightAtATimeAndTheInitialDelay) {
  std::atomic<int> in_flight{0};
  std::atomic<int> most{0};
  std::atomic<int> calls{0};
  absl::Mutex mu;
  absl::Time first_call = absl::InfinitePast();
  ProbeRunnerOptions options;
  options.threads = 4;
  options.check = [&](const std::string&, int, const ProbeSpec&,
                      const std::atomic<bool>&) {
    {
      absl::MutexLock lock(&mu);
      if (first_call == absl::InfinitePast()) first_call = absl::Now();
    }
    const int now = ++in_flight;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
    absl::SleepFor(absl::Milliseconds(250));  // longer than the period
    --in_flight;
    ++calls;
    return absl::OkStatus();
  };
  ProbeRunner runner(options);
  runner.Start();
  ProbeSpec slow = FastProbeSpec();
  slow.initial_delay = absl::Milliseconds(300);
  const absl::Time added = absl::Now();
  runner.Add({"127.0.0.1", 20003, slow, std::nullopt, added}, nullptr);
  ASSERT_TRUE(WaitFor([&] { return calls.load() >= 3; }));
  EXPECT_EQ(most.load(), 1);
  absl::MutexLock lock(&mu);
  EXPECT_GE(first_call - added, absl::Milliseconds(290));
}

TEST(ProbeRunnerTest, RemoveAndShutdownCancelProbesInFlight) {
  std::atomic<int> started{0};
  std::atomic<int> cancelled{0};
  ProbeRunnerOptions options;
  options.check = [&](const std::string&, int, const ProbeSpec&,
                      const std::atomic<bool>& cancel) {
    ++started;
    // A probe with an hour's timeout that only its cancel ends.
    while (!cancel.load()) absl::SleepFor(absl::Milliseconds(5));
    ++cancelled;
    return absl::CancelledError("cancelled");
  };
  auto runner = std::make_unique<ProbeRunner>(options);
  runner->Start();
  ProbeSpec hour = FastProbeSpec();
  hour.period = absl::Hours(1);
  hour.timeout = absl::Hours(1);
  ProbeReports reports;
  const uint64_t a = runner->Add(
      {"127.0.0.1", 1, hour, std::nullopt, absl::Now()}, reports.callback());
  ASSERT_TRUE(WaitFor([&] { return started.load() == 1; }));
  runner->Remove(a);
  ASSERT_TRUE(WaitFor([&] { return cancelled.load() == 1; }, absl::Seconds(2)));
  runner->Add({"127.0.0.1", 2, std::nullopt, hour, absl::Now()},
              reports.callback());
  ASSERT_TRUE(WaitFor([&] { return started.load() == 2; }));
  const absl::Time before = absl::Now();
  runner.reset();  // shuts down: cancels the probe in flight, joins
  EXPECT_LT(absl::Now() - before, absl::Seconds(2));
  EXPECT_EQ(cancelled.load(), 2);
  EXPECT_TRUE(reports.all().empty());  // nothing reported for either
}

TEST(ProbeRunnerTest, ThreadsAreBounded) {
  std::atomic<int> calls{0};
  ProbeRunnerOptions options;
  options.threads = 2;
  options.check = [&](const std::string&, int, const ProbeSpec&,
                      const std::atomic<bool>&) {
    ++calls;
    return absl::OkStatus();
  };
  ProbeRunner runner(options);
  runner.Start();
  std::vector<uint64_t> keys;
  for (int i = 0; i < 20; ++i) {
    keys.push_back(runner.Add(
        {"127.0.0.1", 20000 + i, FastProbeSpec(), FastProbeSpec(), absl::Now()},
        nullptr));
  }
  EXPECT_EQ(runner.threads(), 2u);
  ASSERT_TRUE(WaitFor([&] { return calls.load() >= 80; }));
  for (uint64_t k : keys) runner.Remove(k);
  EXPECT_EQ(runner.size(), 0u);
  // No probes: Add without any registers nothing.
  EXPECT_EQ(runner.Add({"127.0.0.1", 1, std::nullopt, std::nullopt}, nullptr),
            0u);
}

// ---------------------------------------------------------------------------
// The HTTP probe.

class HttpProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Get("/ok", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("fine", "text/plain");
    });
    server_.Get("/moved", [](const httplib::Request&, httplib::Response& res) {
      res.status = 302;
      res.set_header("Location", "/ok");
    });
    server_.Get("/bad", [](const httplib::Request&, httplib::Response& res) {
      res.status = 500;
      res.set_content(std::string(200000, 'x'), "text/plain");
    });
    server_.Get("/path",
                [](const httplib::Request& req, httplib::Response& res) {
                  res.status = req.target == "/path?x=1&y=%20" ? 200 : 404;
                });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    ASSERT_TRUE(WaitFor([this] { return server_.is_running(); }));
  }
  void TearDown() override {
    server_.stop();
    thread_.join();
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(HttpProbeTest, TwoAndThreeHundredsPassOthersFail) {
  const absl::Duration t = absl::Seconds(2);
  EXPECT_TRUE(HttpGetProbe("127.0.0.1", port_, "/ok", t).ok());
  EXPECT_TRUE(HttpGetProbe("127.0.0.1", port_, "/moved", t).ok());
  EXPECT_TRUE(HttpGetProbe("localhost", port_, "/ok", t).ok() ||
              HttpGetProbe("127.0.0.1", port_, "/ok", t).ok());
  EXPECT_TRUE(HttpGetProbe("127.0.0.1", port_, "/path?x=1&y=%20", t).ok());
  absl::Status bad = HttpGetProbe("127.0.0.1", port_, "/bad", t);
  EXPECT_EQ(bad.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(bad.message(), "GET /bad: answered 500");
  absl::Status missing = HttpGetProbe("127.0.0.1", port_, "/nope", t);
  EXPECT_EQ(missing.message(), "GET /nope: answered 404");
}

// A socket listening on 127.0.0.1 (`listen`: false, bound only), closed at
// the end.
class RawListener {
 public:
  explicit RawListener(bool listen = true) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    if (listen) EXPECT_EQ(::listen(fd_, 8), 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~RawListener() { ::close(fd_); }
  int fd() const { return fd_; }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(HttpProbeSocketTest, RefusedSilentCancelledAndGarbage) {
  // A port bound but not listening: refused at once.
  {
    RawListener closed(/*listen=*/false);
    absl::Status refused =
        HttpGetProbe("127.0.0.1", closed.port(), "/healthz", absl::Seconds(1));
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(refused.message()),
                HasSubstr("GET /healthz: connect to 127.0.0.1:"));
    EXPECT_THAT(std::string(refused.message()), HasSubstr("refused"));
  }

  // A listener that never answers: the timeout, not longer.
  RawListener silent;
  const absl::Time before = absl::Now();
  absl::Status quiet = HttpGetProbe("127.0.0.1", silent.port(), "/healthz",
                                    absl::Milliseconds(300));
  const absl::Duration took = absl::Now() - before;
  EXPECT_EQ(quiet.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(quiet.message(), "GET /healthz: no answer within 300ms");
  EXPECT_GE(took, absl::Milliseconds(290));
  EXPECT_LT(took, absl::Seconds(1));

  // Cancelled: returns soon, whatever the timeout.
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(100));
    cancel = true;
  });
  const absl::Time t0 = absl::Now();
  absl::Status stopped = HttpGetProbe("127.0.0.1", silent.port(), "/healthz",
                                      absl::Hours(1), &cancel);
  canceller.join();
  EXPECT_EQ(stopped.code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));

  // Something that is not HTTP.
  RawListener odd;
  std::thread garbage([&] {
    const int c = ::accept(odd.fd(), nullptr, nullptr);
    char buf[512];
    (void)::recv(c, buf, sizeof(buf), 0);
    const char answer[] = "SSH-2.0-OpenSSH\r\n";
    (void)::send(c, answer, sizeof(answer) - 1, MSG_NOSIGNAL);
    ::close(c);
  });
  absl::Status not_http =
      HttpGetProbe("127.0.0.1", odd.port(), "/healthz", absl::Seconds(2));
  garbage.join();
  EXPECT_EQ(not_http.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(not_http.message()),
              HasSubstr("GET /healthz: not an HTTP answer"));

  // A server that closes without a word.
  RawListener mute;
  std::thread closer([&] {
    const int c = ::accept(mute.fd(), nullptr, nullptr);
    ::close(c);
  });
  absl::Status closed =
      HttpGetProbe("127.0.0.1", mute.port(), "/healthz", absl::Seconds(2));
  closer.join();
  EXPECT_EQ(closed.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(closed.message()), HasSubstr("GET /healthz: "));
}

}  // namespace
}  // namespace loom
