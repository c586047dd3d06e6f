// A real HAProxy on loopback, driven the way a `loom gateway` drives it:
// config file, runtime API, master CLI. Two tiny in-process HTTP servers
// stand in for replicas and answer with their own names. Skipped when
// haproxy is not installed (scripts/setup.sh --test installs it).

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/gateway/access_log.h"
#include "loom/gateway/backend_sync.h"
#include "loom/gateway/child_process.h"
#include "loom/gateway/gateway_test_util.h"
#include "loom/gateway/haproxy_process.h"

namespace loom::gateway {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testutil::Eventually;
using testutil::FreePort;
using testutil::Get;
using testutil::HttpAnswer;
using testutil::NameServer;

constexpr char kHaproxy[] = "/usr/sbin/haproxy";

// The receiving end of the access log, read all along (a unix datagram
// socket queues only a few lines: net.unix.max_dgram_qlen).
class LogSink {
 public:
  explicit LogSink(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strcpy(a.sun_path, path.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    timeval tv{0, 50000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    reader_ = std::thread([this] { Read(); });
  }
  ~LogSink() {
    stop_ = true;
    reader_.join();
    ::close(fd_);
  }
  // Access entries of `backend` once `want` of them came, or after 10 s.
  std::vector<AccessLogEntry> Collect(const std::string& backend, size_t want) {
    std::vector<AccessLogEntry> out;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      out.clear();
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const AccessLogEntry& e : entries_) {
          if (e.backend == backend) out.push_back(e);
        }
      }
      if (out.size() >= want) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return out;
  }

 private:
  void Read() {
    char buf[4096];
    while (!stop_) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) continue;
      // HAProxy's own event lines ("Server ... is UP") come here too.
      absl::StatusOr<AccessLogEntry> e =
          ParseAccessLogLine(std::string_view(buf, n));
      if (!e.ok()) continue;
      std::lock_guard<std::mutex> lock(mu_);
      entries_.push_back(*e);
    }
  }

  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread reader_;
  std::mutex mu_;
  std::vector<AccessLogEntry> entries_;
};

class HaproxyIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(kHaproxy, X_OK) != 0) {
      GTEST_SKIP() << "haproxy is not installed at " << kHaproxy
                   << " (scripts/setup.sh --test installs it)";
    }
    char tmpl[] = "/tmp/loom-gw-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    HaproxyProcessOptions o;
    o.binary = kHaproxy;
    absl::StatusOr<std::shared_ptr<const RunDir>> run_dir =
        RunDir::Open(dir_, /*create=*/false);
    ASSERT_TRUE(run_dir.ok()) << run_dir.status();
    o.run_dir = *run_dir;
    o.terminate_with_parent = true;
    o.stop_timeout = absl::Seconds(5);
    process_ = std::make_unique<HaproxyProcess>(o);
    config_.stats_socket = o.run_dir->PathOf("admin.sock");
    config_.log_socket = o.run_dir->PathOf("log.sock");
    config_.hard_stop_after = absl::Seconds(10);
    config_.nbthread = 2;
    config_.services = {Service("alpha", FreePort())};
  }
  void TearDown() override {
    if (process_) {
      EXPECT_TRUE(process_->Stop().ok());
    }
    process_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  // Checks twice a second, so that a dead replica is seen quickly.
  static ServerOptions Options() {
    ServerOptions o;
    o.check_interval = absl::Milliseconds(500);
    return o;
  }
  static ServiceFrontend Service(std::string name, int port) {
    ServiceFrontend s;
    s.name = std::move(name);
    s.bind_host = "127.0.0.1";
    s.port = port;
    s.server_options = Options();
    return s;
  }
  SyncReport Sync(const std::string& service, const DesiredBackend& want) {
    absl::StatusOr<SyncReport> r =
        SyncBackend(process_->runtime(), BackendName(service), want, Options());
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    EXPECT_TRUE(r->status().ok()) << r->status();
    return *r;
  }
  // The servers that answered `n` requests to `port`.
  static std::multiset<std::string> Answers(int port, int n) {
    std::multiset<std::string> out;
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<HttpAnswer> a = Get(port, "/");
      out.insert(a.ok() ? absl::StrCat(a->status, " ", a->body)
                        : std::string(a.status().message()));
    }
    return out;
  }

  std::string dir_;
  std::unique_ptr<HaproxyProcess> process_;
  HaproxyConfig config_;
};

TEST_F(HaproxyIntegrationTest, RenderedConfigPassesHaproxyCheck) {
  config_.services.push_back(Service("beta", FreePort()));
  config_.services[1].balance = Balance::kRandom;
  config_.services[1].bind_host = "::1";
  config_.services[1].server_options.maxconn = 4;
  config_.services[0].seed_servers = {{"r1", "127.0.0.1:1"}, {"r2", "[::1]:2"}};
  const absl::StatusOr<std::string> text = RenderHaproxyConfig(config_);
  ASSERT_TRUE(text.ok()) << text.status();
  const std::string path = dir_ + "/check.cfg";
  std::ofstream(path) << *text;
  absl::StatusOr<CommandResult> r =
      RunCommand({kHaproxy, "-c", "-f", path}, absl::Seconds(30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->succeeded()) << r->output << "\n" << *text;
}

TEST_F(HaproxyIntegrationTest, ServesDrainsDeletesAndReloads) {
  LogSink log(config_.log_socket);
  NameServer a("a"), b("b");
  const absl::Status started = process_->Start(config_);
  ASSERT_TRUE(started.ok()) << started;
  const int alpha = config_.services[0].port;
  EXPECT_THAT(Answers(alpha, 1), ElementsAre(HasSubstr("503")));  // empty

  // Two replicas added at run time; both take traffic.
  SyncReport r =
      Sync("alpha", {{"a", {a.address(), true}}, {"b", {b.address(), true}}});
  EXPECT_EQ(r.applied.size(), 2u);
  std::multiset<std::string> seen = Answers(alpha, 10);
  EXPECT_EQ(seen.count("200 a") + seen.count("200 b"), 10u);
  EXPECT_GT(seen.count("200 a"), 0u);
  EXPECT_GT(seen.count("200 b"), 0u);

  // A request held in flight at one of them, which is then drained.
  std::thread held([alpha] {
    absl::StatusOr<HttpAnswer> got = Get(alpha, "/hold");
    EXPECT_TRUE(got.ok() && got->status == 200) << got.status();
  });
  ASSERT_TRUE(Eventually([&] { return a.holding() + b.holding() == 1; }));
  NameServer& busy = a.holding() == 1 ? a : b;
  NameServer& other = a.holding() == 1 ? b : a;
  const std::string busy_name = &busy == &a ? "a" : "b";
  const std::string other_name = &busy == &a ? "b" : "a";
  const DesiredBackend draining = {{busy_name, {busy.address(), false}},
                                   {other_name, {other.address(), true}}};
  r = Sync("alpha", draining);
  EXPECT_THAT(r.applied,
              ElementsAre(SyncAction{SyncAction::Kind::kDrain, busy_name, ""}));
  seen = Answers(alpha, 10);
  EXPECT_EQ(seen.count("200 " + other_name), 10u) << "drained server got "
                                                     "new requests";
  // Not deleted while the held request is in flight.
  r = Sync("alpha", draining);
  EXPECT_TRUE(r.applied.empty());
  EXPECT_THAT(r.waiting, ElementsAre(busy_name));
  absl::StatusOr<std::vector<StatRow>> stats = process_->runtime().ShowStat();
  ASSERT_TRUE(stats.ok()) << stats.status();
  bool found = false;
  for (const StatRow& row : *stats) {
    if (row.proxy == "be_alpha" && row.name == busy_name) {
      found = true;
      EXPECT_EQ(row.status.rfind("DRAIN", 0), 0u) << row.status;
      EXPECT_EQ(row.scur, 1);
    }
  }
  EXPECT_TRUE(found);
  // The request in flight finishes; then the server goes.
  busy.Release();
  held.join();
  ASSERT_TRUE(Eventually([&] {
    return !Sync("alpha", draining).applied.empty();  // maint + delete
  }));
  absl::StatusOr<std::vector<ServerStateRow>> servers =
      process_->runtime().ShowServersState();
  ASSERT_TRUE(servers.ok());
  ASSERT_EQ(servers->size(), 1u);
  EXPECT_EQ((*servers)[0].server, other_name);

  // Statistics.
  stats = process_->runtime().ShowStat();
  ASSERT_TRUE(stats.ok()) << stats.status();
  int64_t frontend_requests = 0, other_2xx = 0;
  for (const StatRow& row : *stats) {
    if (row.proxy == "fe_alpha" && row.type == StatRow::Type::kFrontend) {
      frontend_requests = row.req_tot;
    }
    if (row.proxy == "be_alpha" && row.name == other_name) {
      other_2xx = row.hrsp_2xx;
      EXPECT_EQ(row.scur, 0);
      EXPECT_EQ(row.address, other.address());
    }
  }
  EXPECT_EQ(frontend_requests, 22);  // 1 + 10 + 1 held + 10
  EXPECT_GE(other_2xx, 10);
  // The access log carries status and times for each of them.
  const std::vector<AccessLogEntry> logged = log.Collect("be_alpha", 22);
  ASSERT_EQ(logged.size(), 22u);
  int held_logged = 0;
  for (const AccessLogEntry& e : logged) {
    EXPECT_TRUE(e.status == 200 || e.status == 503) << e.status;
    EXPECT_GE(e.active_ms, 0);
    EXPECT_GE(e.total_ms, e.active_ms);
    if (e.server == busy_name && e.status == 200) ++held_logged;
  }
  EXPECT_GE(held_logged, 1);

  // A second service: a reload, during which alpha keeps answering.
  const int old_worker = process_->worker_pid();
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::thread client([&] {
    while (!stop) {
      absl::StatusOr<HttpAnswer> got = Get(alpha, "/");
      (got.ok() && got->status == 200 ? ok : failed)++;
    }
  });
  ASSERT_TRUE(Eventually([&] { return ok > 0; }));
  HaproxyConfig two = config_;
  two.services.push_back(Service("beta", FreePort()));
  absl::StatusOr<bool> reloaded = process_->Apply(two);
  const int before_stop = ok;
  ASSERT_TRUE(Eventually([&] { return ok > before_stop + 5; }));
  stop = true;
  client.join();
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_TRUE(*reloaded);
  EXPECT_NE(process_->worker_pid(), old_worker);
  EXPECT_EQ(failed, 0) << "requests failed across the reload (ok: " << ok
                       << ")";
  EXPECT_THAT(Answers(alpha, 3),
              ElementsAre("200 " + other_name, "200 " + other_name,
                          "200 " + other_name));
  // Alpha's server came through the reload as a seed: nothing to do.
  EXPECT_TRUE(
      Sync("alpha", {{other_name, {other.address(), true}}}).applied.empty());
  // Beta starts empty, then serves what it is given.
  const int beta = two.services[1].port;
  EXPECT_THAT(Answers(beta, 1), ElementsAre(HasSubstr("503")));
  Sync("beta", {{busy_name, {busy.address(), true}}});
  EXPECT_THAT(Answers(beta, 2),
              ElementsAre("200 " + busy_name, "200 " + busy_name));

  // The same services again: no reload.
  const int worker = process_->worker_pid();
  reloaded = process_->Apply(two);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_FALSE(*reloaded);
  EXPECT_EQ(process_->worker_pid(), worker);

  ASSERT_TRUE(process_->Stop().ok());
  EXPECT_FALSE(process_->running());
  EXPECT_FALSE(Get(alpha, "/").ok());
}

TEST_F(HaproxyIntegrationTest, DeadReplicaIsRoutedAround) {
  NameServer a("a"), b("b");
  const absl::Status started = process_->Start(config_);
  ASSERT_TRUE(started.ok()) << started;
  const int alpha = config_.services[0].port;
  Sync("alpha", {{"a", {a.address(), true}}, {"b", {b.address(), true}}});
  b.Stop();  // killed: connections refused from now on
  // Retries go to the other server (option redispatch 1), and the first
  // refused connection marks the dead one down.
  std::multiset<std::string> seen = Answers(alpha, 20);
  EXPECT_EQ(seen.count("200 a"), 20u);
  EXPECT_TRUE(Eventually([&] {
    absl::StatusOr<std::vector<StatRow>> stats = process_->runtime().ShowStat();
    if (!stats.ok()) return false;
    for (const StatRow& row : *stats) {
      if (row.proxy == "be_alpha" && row.name == "b") {
        return row.status.rfind("DOWN", 0) == 0;
      }
    }
    return false;
  }));
}

TEST_F(HaproxyIntegrationTest, FailedReloadKeepsTheOldConfigServing) {
  NameServer a("a");
  const absl::Status started = process_->Start(config_);
  ASSERT_TRUE(started.ok()) << started;
  const int alpha = config_.services[0].port;
  Sync("alpha", {{"a", {a.address(), true}}});
  // A port someone else holds: HAProxy cannot bind it.
  NameServer squatter("squatter");
  HaproxyConfig two = config_;
  two.services.push_back(
      Service("beta", std::atoi(squatter.address().substr(10).c_str())));
  std::ifstream before_in(process_->config_path());
  const std::string before((std::istreambuf_iterator<char>(before_in)), {});
  const absl::StatusOr<bool> reloaded = process_->Apply(two);
  EXPECT_EQ(reloaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(reloaded.status().message()),
              HasSubstr("previous config stays in force"));
  ASSERT_TRUE(process_->CheckRunning().ok());
  EXPECT_THAT(Answers(alpha, 2), ElementsAre("200 a", "200 a"));
  std::ifstream after_in(process_->config_path());
  const std::string after((std::istreambuf_iterator<char>(after_in)), {});
  EXPECT_EQ(after, before);
  EXPECT_EQ(process_->config().services.size(), 1u);
}

}  // namespace
}  // namespace loom::gateway
