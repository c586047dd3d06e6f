#include "loom/gateway/haproxy_runtime.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::gateway {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The header and a row exactly as HAProxy 2.6.12 wrote them (a dynamic
// server just added, so in MAINT).
constexpr char kHeader[] =
    "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq"
    ",econ,eresp,wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg"
    ",downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,rate_lim"
    ",rate_max,check_status,check_code,check_duration,hrsp_1xx,hrsp_2xx,hrs"
    "p_3xx,hrsp_4xx,hrsp_5xx,hrsp_other,hanafail,req_rate,req_rate_max,req_"
    "tot,cli_abrt,srv_abrt,comp_in,comp_out,comp_byp,comp_rsp,lastsess,last"
    "_chk,last_agt,qtime,ctime,rtime,ttime,agent_status,agent_code,agent_du"
    "ration,check_desc,agent_desc,check_rise,check_fall,check_health,agent_"
    "rise,agent_fall,agent_health,addr,cookie,mode,algo,conn_rate,conn_rate"
    "_max,conn_tot,intercepted,dcon,dses,wrew,connect,reuse,cache_lookups,c"
    "ache_hits,srv_icur,src_ilim,qtime_max,ctime_max,rtime_max,ttime_max,ei"
    "nt,idle_conn_cur,safe_conn_cur,used_conn_cur,need_conn_est,uweight,agg"
    "_server_status,agg_server_check_status,agg_check_status,-,ssl_sess,ssl"
    "_reused_sess,ssl_failed_handshake,h2_headers_rcvd,h2_data_rcvd,h2_sett"
    "ings_rcvd,h2_rst_stream_rcvd,h2_goaway_rcvd,h2_detected_conn_protocol_"
    "errors,h2_detected_strm_protocol_errors,h2_rst_stream_resp,h2_goaway_r"
    "esp,h2_open_connections,h2_backend_open_streams,h2_total_connections,h"
    "2_backend_total_streams,h1_open_connections,h1_open_streams,h1_total_c"
    "onnections,h1_total_streams,h1_bytes_in,h1_bytes_out,h1_spliced_bytes_"
    "in,h1_spliced_bytes_out,";
constexpr char kRealRow[] =
    "be_svc,a,0,0,0,0,,0,0,0,,0,,0,0,0,0,MAINT,1,1,0,,,0,,,1,3,1,,0,,2,0,,0"
    ",,,,0,0,0,0,0,0,,,,0,0,0,,,,,-1,,,0,0,0,0,,,,,,,,,,,,127.0.0.1:18081,,"
    "http,,,,,,,,0,0,0,,,0,0,0,0,0,0,0,0,0,0,0,1,,,,-,0,0,0,,,,,,,,,,,,,,,,"
    ",,,,,,";

// A row for `kHeader` with the given fields set and the others empty.
std::string Row(const std::map<std::string, std::string>& fields) {
  std::vector<std::string> names =
      absl::StrSplit(absl::string_view(kHeader + 2), ',');
  std::string out;
  for (size_t i = 0; i + 1 < names.size(); ++i) {
    auto it = fields.find(names[i]);
    absl::StrAppend(&out, it == fields.end() ? "" : it->second, ",");
  }
  return out;
}

std::string ShowStatAnswer() {
  return absl::StrCat(kHeader, "\n",
                      Row({{"pxname", "fe_svc"},
                           {"svname", "FRONTEND"},
                           {"type", "0"},
                           {"status", "OPEN"},
                           {"scur", "2"},
                           {"req_tot", "40"},
                           {"req_rate", "6"}}),
                      "\n", kRealRow, "\n",
                      Row({{"pxname", "be_svc"},
                           {"svname", "b"},
                           {"type", "2"},
                           {"status", "UP 1/2"},
                           {"qcur", "2"},
                           {"scur", "4"},
                           {"stot", "20"},
                           {"hrsp_2xx", "19"},
                           {"hrsp_5xx", "1"},
                           {"econ", "1"},
                           {"rtime", "9"},
                           {"ttime", "11"},
                           {"last_chk", "\"Layer4, \"\"quoted\"\"\""},
                           {"addr", "127.0.0.1:18082"}}),
                      "\n",
                      Row({{"pxname", "be_svc"},
                           {"svname", "BACKEND"},
                           {"type", "1"},
                           {"status", "UP"},
                           {"scur", "5"},
                           {"req_tot", "32"}}),
                      "\n\n");
}

TEST(ParseShowStatTest, ReadsRowsByHeaderName) {
  absl::StatusOr<std::vector<StatRow>> rows = ParseShowStat(ShowStatAnswer());
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 4u);
  const StatRow& fe = (*rows)[0];
  EXPECT_EQ(fe.type, StatRow::Type::kFrontend);
  EXPECT_EQ(fe.status, "OPEN");
  EXPECT_EQ(fe.req_tot, 40);
  EXPECT_EQ(fe.req_rate, 6);
  const StatRow& a = (*rows)[1];
  EXPECT_EQ(a.proxy, "be_svc");
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.type, StatRow::Type::kServer);
  EXPECT_EQ(a.status, "MAINT");
  EXPECT_EQ(a.scur, 0);
  EXPECT_EQ(a.weight, 1);
  EXPECT_EQ(a.address, "127.0.0.1:18081");
  const StatRow& b = (*rows)[2];
  EXPECT_EQ(b.status, "UP 1/2");
  EXPECT_EQ(b.qcur, 2);
  EXPECT_EQ(b.scur, 4);
  EXPECT_EQ(b.stot, 20);
  EXPECT_EQ(b.hrsp_2xx, 19);
  EXPECT_EQ(b.hrsp_5xx, 1);
  EXPECT_EQ(b.econ, 1);
  EXPECT_EQ(b.rtime_ms, 9);
  EXPECT_EQ(b.ttime_ms, 11);
  EXPECT_EQ(b.address, "127.0.0.1:18082");  // after the quoted commas
  const StatRow& be = (*rows)[3];
  EXPECT_EQ(be.type, StatRow::Type::kBackend);
  EXPECT_EQ(be.scur, 5);
  EXPECT_EQ(be.req_tot, 32);
}

TEST(ParseShowStatTest, RejectsAnswersWithoutHeader) {
  EXPECT_FALSE(ParseShowStat("No such proxy.\n").ok());
  EXPECT_FALSE(ParseShowStat("# pxname,svname\nx,y\n").ok());  // no type...
}

constexpr char kServersState[] =
    "1\n"
    "# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state "
    "srv_uweight srv_iweight srv_time_since_last_change srv_check_status "
    "srv_check_result srv_check_health srv_check_state srv_agent_state "
    "bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl "
    "srv_check_port srv_check_addr srv_agent_addr srv_agent_port\n"
    "3 be_svc 1 a 127.0.0.1 2 0 1 1 5 6 3 4 6 0 0 0 - 18081 - 0 0 - - 0\n"
    "3 be_svc 2 b 127.0.0.1 2 8 1 1 5 6 3 4 6 0 0 0 - 18082 - 0 0 - - 0\n"
    "3 be_svc 3 c ::1 0 1 1 1 0 1 0 0 0 0 0 0 - 18083 - 0 0 - - 0\n"
    "4 be_y 1 d - 0 33 1 1 0 1 0 0 0 0 0 0 host 80 - 0 0 - - 0\n\n";

TEST(ParseServersStateTest, ReadsAdminStateFromTheMask) {
  absl::StatusOr<std::vector<ServerStateRow>> rows =
      ParseServersState(kServersState);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 4u);
  EXPECT_EQ((*rows)[0].server, "a");
  EXPECT_EQ((*rows)[0].admin, ServerAdminState::kReady);
  EXPECT_EQ((*rows)[0].address, "127.0.0.1:18081");
  EXPECT_EQ((*rows)[0].op_state, 2);
  EXPECT_EQ((*rows)[1].admin, ServerAdminState::kDrain);  // 0x08
  EXPECT_EQ((*rows)[2].admin, ServerAdminState::kMaint);  // 0x01
  EXPECT_EQ((*rows)[2].address, "[::1]:18083");
  EXPECT_EQ((*rows)[3].backend, "be_y");
  EXPECT_EQ((*rows)[3].admin, ServerAdminState::kMaint);  // 0x20 | 0x01
  EXPECT_EQ((*rows)[3].address, "");                      // unresolved
}

TEST(ParseServersStateTest, EmptyAndBad) {
  absl::StatusOr<std::vector<ServerStateRow>> none =
      ParseServersState("1\n# be_id be_name srv_id srv_name\n");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(*none, IsEmpty());
  EXPECT_FALSE(ParseServersState("Unknown command\n").ok());
}

// A stand-in for HAProxy's CLI: answers each command from a table and
// records what it was sent. Unknown commands get `fallback`.
class FakeCli {
 public:
  explicit FakeCli(std::map<std::string, std::string> answers,
                   bool silent = false)
      : answers_(std::move(answers)), silent_(silent) {
    char dir[] = "/tmp/loom-gw-cli-XXXXXX";
    EXPECT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/cli.sock";
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path_.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeCli() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }
  std::vector<std::string> received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }

 private:
  void Serve() {
    while (!stop_) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      std::string in;
      char buf[512];
      ssize_t n;
      while ((n = ::read(c, buf, sizeof(buf))) > 0) in.append(buf, n);
      while (!in.empty() && in.back() == '\n') in.pop_back();
      {
        std::lock_guard<std::mutex> lock(mu_);
        received_.push_back(in);
      }
      if (!silent_) {
        auto it = answers_.find(in);
        const std::string out =
            it != answers_.end() ? it->second : "Unknown command.\n";
        (void)!::write(c, out.data(), out.size());
        ::close(c);
      } else {
        held_.push_back(c);  // never answered
      }
    }
    for (int c : held_) ::close(c);
  }

  const std::map<std::string, std::string> answers_;
  const bool silent_;
  std::string dir_, path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> received_;
  std::vector<int> held_;
};

constexpr char kAdd[] =
    "add server be_svc/r1 127.0.0.1:9000 check inter 2000 rise 2 fall 2 "
    "observe layer4 error-limit 1 on-error mark-down";

TEST(HaproxyRuntimeTest, AddServerAddsThenReadiesThenEnablesTheCheck) {
  FakeCli cli({{kAdd, "New server registered.\n\n"},
               {"set server be_svc/r1 state ready", "\n"},
               {"enable health be_svc/r1", "\n"}});
  HaproxyRuntime rt(cli.path());
  ASSERT_TRUE(
      rt.AddServer("be_svc", "r1", "127.0.0.1:9000", ServerOptions()).ok());
  EXPECT_THAT(cli.received(),
              ElementsAre(kAdd, "set server be_svc/r1 state ready",
                          "enable health be_svc/r1"));
}

TEST(HaproxyRuntimeTest, AddServerWithoutCheckSkipsEnableHealth) {
  FakeCli cli({{"add server be_svc/r1 [::1]:9000", "New server registered.\n"},
               {"set server be_svc/r1 state ready", ""}});
  HaproxyRuntime rt(cli.path());
  ServerOptions o;
  o.health_check = false;
  ASSERT_TRUE(rt.AddServer("be_svc", "r1", "[::1]:9000", o).ok());
  EXPECT_THAT(cli.received(), ElementsAre("add server be_svc/r1 [::1]:9000",
                                          "set server be_svc/r1 state ready"));
}

TEST(HaproxyRuntimeTest, AddServerRollsBackWhenReadyFails) {
  FakeCli cli({{kAdd, "New server registered.\n\n"},
               {"set server be_svc/r1 state ready", "Something broke.\n"},
               {"set server be_svc/r1 state maint", "\n"},
               {"del server be_svc/r1", "Server deleted.\n"}});
  HaproxyRuntime rt(cli.path());
  const absl::Status s =
      rt.AddServer("be_svc", "r1", "127.0.0.1:9000", ServerOptions());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("'set server be_svc/r1 state ready': Something "
                        "broke."));
  EXPECT_THAT(
      cli.received(),
      ElementsAre(kAdd, "set server be_svc/r1 state ready",
                  "set server be_svc/r1 state maint", "del server be_svc/r1"));
}

TEST(HaproxyRuntimeTest, RefusalsKeepHaproxysWordsAndMapToCodes) {
  const std::string static_rr =
      "Backend must use a dynamic load balancing to support dynamic servers.";
  FakeCli cli(
      {{"add server be_a/r1 10.0.0.1:1 maxconn 4", static_rr + "\n"},
       {"add server be_b/r1 10.0.0.1:1 maxconn 4", "No such backend.\n"},
       {"add server be_c/r1 10.0.0.1:1 maxconn 4",
        "Already exists a server with the same name in backend.\n"},
       {"del server be_a/r1",
        "Only servers in maintenance mode can be deleted.\n"},
       {"set server be_a/r9 state drain", "No such server.\n\n"}});
  HaproxyRuntime rt(cli.path());
  ServerOptions o;
  o.health_check = false;
  o.maxconn = 4;
  absl::Status s = rt.AddServer("be_a", "r1", "10.0.0.1:1", o);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(s.message()),
      HasSubstr("'add server be_a/r1 10.0.0.1:1 maxconn 4': " + static_rr));
  EXPECT_EQ(rt.AddServer("be_b", "r1", "10.0.0.1:1", o).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(rt.AddServer("be_c", "r1", "10.0.0.1:1", o).code(),
            absl::StatusCode::kAlreadyExists);
  s = rt.DelServer("be_a", "r1");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("maintenance mode"));
  EXPECT_EQ(rt.SetServerState("be_a", "r9", ServerAdminState::kDrain).code(),
            absl::StatusCode::kNotFound);
}

TEST(HaproxyRuntimeTest, BadNamesAreRefusedBeforeAnythingIsSent) {
  FakeCli cli({});
  HaproxyRuntime rt(cli.path());
  EXPECT_EQ(rt.AddServer("be_a;del", "r1", "10.0.0.1:1", {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rt.AddServer("be_a", "r 1", "10.0.0.1:1", {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rt.AddServer("be_a", "r1", "host:1", {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rt.DelServer("be/a", "r1").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rt.Execute("show info; show stat").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cli.received(), IsEmpty());
}

TEST(HaproxyRuntimeTest, ShowStatAndWorkerPid) {
  FakeCli cli({{"show stat", ShowStatAnswer()},
               {"show info", "Name: HAProxy\nVersion: 2.6\nPid: 4242\n"}});
  HaproxyRuntime rt(cli.path());
  absl::StatusOr<std::vector<StatRow>> rows = rt.ShowStat();
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->size(), 4u);
  absl::StatusOr<int> pid = rt.WorkerPid();
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(*pid, 4242);
}

TEST(HaproxyRuntimeTest, NoSocketIsUnavailable) {
  HaproxyRuntime rt("/tmp/loom-gw-no-such-dir/admin.sock");
  const absl::Status s = rt.Execute("show info").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("/tmp/loom-gw-no-such-dir/admin.sock 'show info'"));
}

TEST(HaproxyRuntimeTest, SilentPeerHitsTheDeadline) {
  FakeCli cli({}, /*silent=*/true);
  HaproxyRuntime rt(cli.path(), absl::Milliseconds(200));
  const absl::Time start = absl::Now();
  const absl::Status s = rt.Execute("show stat").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace loom::gateway
