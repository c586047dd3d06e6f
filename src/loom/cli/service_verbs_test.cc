#include "loom/cli/service_verbs.h"

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/cli/cli_test_util.h"
#include "loom/common/refusing_port_test_util.h"
#include "loom/core/service_spec.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Json = nlohmann::json;

// Service `name` as the server writes it: two replicas, jobs 42 (ready, of
// the current revision) and 13 (starting, of an old one).
Json SampleService(const std::string& name = "embed") {
  return {
      {"name", name},
      {"user", "carol"},
      {"project", "search"},
      {"port", 30000},
      {"revision", "3f2a9c1d0b7e"},
      {"generation", 2},
      {"desired", 2},
      {"min", 1},
      {"max", 8},
      {"ready", 1},
      {"state", "active"},
      {"status",
       "rolling out revision 3f2a9c1d0b7e: 1 of 2 new replica(s) serving, 1 "
       "old still serving"},
      {"created", Rfc3339(kNow - absl::Hours(2))},
      {"updated", Rfc3339(kNow - absl::Minutes(3))},
      {"events",
       {{{"time", Rfc3339(kNow - absl::Hours(2))},
         {"message",
          "created: 1 replica(s) of revision 0a1b2c3d4e5f on port "
          "30000"}},
        {{"time", Rfc3339(kNow - absl::Minutes(3))},
         {"message",
          "applied generation 2: new revision 3f2a9c1d0b7e, "
          "rolling update"}}}},
      {"replicas",
       {{{"job", 42},
         {"node", "h200-0"},
         {"address", "127.0.0.2:31001"},
         {"phase", "ready"},
         {"revision", "3f2a9c1d0b7e"},
         {"current", true},
         {"in_balancer", true},
         {"since", Rfc3339(kNow - absl::Minutes(2))}},
        {{"job", 13},
         {"node", "h200-1"},
         {"address", "127.0.0.3:31002"},
         {"phase", "draining"},
         {"revision", "0a1b2c3d4e5f"},
         {"current", false},
         {"in_balancer", false},
         {"since", Rfc3339(kNow - absl::Seconds(20))},
         {"reason", "replaced by a replica of the new revision"}}}},
      {"spec", {{"name", name}}}};
}

TEST(FormatServiceTable, ListsServices) {
  Json fixed = SampleService("rerank");
  fixed["min"] = fixed["max"] = fixed["desired"] = 3;
  fixed["ready"] = 0;
  fixed["port"] = 30001;
  fixed["state"] = "deleting";
  fixed["status"] = "";
  const Json list = {{"services", {SampleService(), fixed}}};
  EXPECT_EQ(FormatServiceTable(list),
            "NAME    USER   PROJECT  PORT   READY  DESIRED  REVISION      "
            "STATUS\n"
            "embed   carol  search   30000  1      2 (1-8)  3f2a9c1d0b7e  "
            "rolling out revision 3f2a9c1d0b7e: 1 of 2 new replica(s) "
            "serving, 1 old still serving\n"
            "rerank  carol  search   30001  0      3        3f2a9c1d0b7e  "
            "deleting\n");
  EXPECT_EQ(FormatServiceTable({{"services", Json::array()}}),
            "NAME  USER  PROJECT  PORT  READY  DESIRED  REVISION  STATUS\n");
}

TEST(FormatServiceDetails, FieldsReplicasAndEvents) {
  Json s = SampleService();
  s["traffic"] = {{"in_flight", 3},
                  {"rps", 12.5},
                  {"p95_ms", 41.2},
                  {"reported", Rfc3339(kNow - absl::Seconds(2))}};
  const std::string out = FormatServiceDetails(s, kNow);
  EXPECT_THAT(out, StartsWith("Name:      embed\n"
                              "User:      carol\n"
                              "Project:   search\n"
                              "State:     active\n"
                              "Status:    rolling out revision"));
  EXPECT_THAT(out, HasSubstr("Port:      30000\n"
                             "Revision:  3f2a9c1d0b7e (generation 2)\n"
                             "Ready:     1 of 2 desired (autoscaled, 1 to 8)\n"
                             "Traffic:   3 in flight, 12.5 req/s, p95 41 ms "
                             "(reported 2s ago)\n"
                             "Created:   2026-11-29 14:20:00 UTC (2h ago)\n"));
  EXPECT_THAT(
      out,
      HasSubstr("Replicas:\n"
                "  JOB  NODE    ADDRESS          PHASE     REVISION            "
                "SINCE    REASON\n"
                "  42   h200-0  127.0.0.2:31001  ready     3f2a9c1d0b7e        "
                "2m ago   -\n"
                "  13   h200-1  127.0.0.3:31002  draining  0a1b2c3d4e5f (old)  "
                "20s ago  replaced by a replica of the new revision\n"
                "Events:\n"
                "  TIME                     AGE     MESSAGE\n"
                "  2026-11-29 14:20:00 UTC  2h ago  created: 1 replica(s)"));
  // A fixed count, no traffic, no replicas.
  s = SampleService();
  s["min"] = s["max"] = 2;
  s["replicas"] = Json::array();
  s["events"] = Json::array();
  const std::string bare = FormatServiceDetails(s, kNow);
  EXPECT_THAT(bare, HasSubstr("Ready:     1 of 2 desired\n"));
  EXPECT_THAT(bare, Not(HasSubstr("Traffic")));
  EXPECT_THAT(bare, HasSubstr("Replicas: none\n"));
  EXPECT_THAT(bare, Not(HasSubstr("Events")));
  // Not an object: dashes, no exception.
  EXPECT_THAT(FormatServiceDetails(Json(), kNow), StartsWith("Name:      -\n"));
}

TEST(ApplyOutcome, FromTheGeneration) {
  const Json before = {{"generation", 1}};
  EXPECT_EQ(ApplyOutcome(nullptr, {{"generation", 1}}), "created");
  EXPECT_EQ(ApplyOutcome(&before, {{"generation", 1}}), "unchanged");
  EXPECT_EQ(ApplyOutcome(&before, {{"generation", 2}}), "updated");
}

constexpr char kSpec[] =
    "kind: service\n"
    "name: embed\n"
    "replicas: {min: 1, max: 8}\n"
    "command: [python3, serve.py]\n"
    "autoscale: {metric: in_flight, target: 4}\n";

// The verbs against a fake server that keeps services as the real one does
// for what they show: an apply of a new name creates it (generation 1), of
// other text makes a new generation, of the same text changes nothing.
class ServiceVerbTest : public VerbTest {
 protected:
  void SetUp() override {
    httplib::Server& s = fake_.server();
    s.Post("/v1/services", [this](const httplib::Request& req,
                                  httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      sent_.push_back(absl::StrCat("POST /v1/services ",
                                   req.get_header_value("Content-Type")));
      absl::StatusOr<ServiceSpec> spec =
          ParseServiceSpec(req.body, "request body");
      if (!spec.ok()) {
        Answer(res, 400,
               {{"error",
                 {{"code", "invalid_argument"},
                  {"message", std::string(spec.status().message())}}}});
        return;
      }
      if (spec->name == "taken") {
        Answer(res, 409,
               {{"error",
                 {{"code", "failed_precondition"},
                  {"message", "port: 30000 is the port of service embed"}}}});
        return;
      }
      auto it = services_.find(spec->name);
      if (it == services_.end()) {
        Json svc = SampleService(spec->name);
        svc["generation"] = 1;
        it = services_.emplace(spec->name, svc).first;
      } else if (texts_[spec->name] != req.body) {
        it->second["generation"] = it->second["generation"].get<int>() + 1;
        it->second["revision"] = "77aa00bb11cc";
      }
      texts_[spec->name] = req.body;
      Answer(res, 200, it->second);
    });
    s.Get("/v1/services",
          [this](const httplib::Request&, httplib::Response& res) {
            std::lock_guard<std::mutex> lock(mu_);
            Json list = Json::array();
            for (const auto& [name, svc] : services_) list.push_back(svc);
            Answer(res, 200, {{"services", list}});
          });
    s.Get(R"(/v1/services/([^/]+))",
          [this](const httplib::Request& req, httplib::Response& res) {
            std::lock_guard<std::mutex> lock(mu_);
            const std::string name = req.matches[1];
            sent_.push_back("GET /v1/services/" + name);
            auto it = services_.find(name);
            if (it == services_.end()) {
              return NotFound(res, name);
            }
            Answer(res, 200, it->second);
          });
    s.Post(R"(/v1/services/([^/]+)/scale)",
           [this](const httplib::Request& req, httplib::Response& res) {
             std::lock_guard<std::mutex> lock(mu_);
             const std::string name = req.matches[1];
             sent_.push_back(
                 absl::StrCat("POST /v1/services/", name, "/scale ", req.body));
             auto it = services_.find(name);
             if (it == services_.end()) return NotFound(res, name);
             const Json body = Json::parse(req.body);
             if (body["replicas"].get<int>() > 8) {
               Answer(res, 400,
                      {{"error",
                        {{"code", "invalid_argument"},
                         {"message",
                          "replicas: must be 1 to 8 (the service's "
                          "replicas.max), got 9"}}}});
               return;
             }
             it->second["desired"] = body["replicas"];
             Answer(res, 200, it->second);
           });
    s.Post(R"(/v1/services/([^/]+)/delete)", [this](const httplib::Request& req,
                                                    httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      const std::string name = req.matches[1];
      sent_.push_back(absl::StrCat("POST /v1/services/", name, "/delete"));
      auto it = services_.find(name);
      if (it == services_.end()) return NotFound(res, name);
      it->second["state"] = "deleting";
      it->second["status"] = "deleting: 2 replica(s) left to drain and stop";
      Answer(res, 200, it->second);
    });
    VerbTest::SetUp();
  }

  static void Answer(httplib::Response& res, int status, const Json& j) {
    res.status = status;
    res.set_content(j.dump(), "application/json");
  }
  static void NotFound(httplib::Response& res, const std::string& name) {
    Answer(res, 404,
           {{"error",
             {{"code", "not_found"}, {"message", "no service " + name}}}});
  }

  std::map<std::string, Json> services_;
  std::map<std::string, std::string> texts_;  // the last text applied
  std::vector<std::string> sent_;
};

TEST_F(ServiceVerbTest, ApplyCreatesUpdatesOrChangesNothing) {
  const std::string file = TempFile("svc.yaml", kSpec);
  CliResult r = Run({"service", "apply", "-f", file});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "service embed created (revision 3f2a9c1d0b7e, port 30000)\n");
  // The text is sent as it is.
  EXPECT_EQ(texts_["embed"], kSpec);
  EXPECT_EQ(sent_,
            (std::vector<std::string>{"GET /v1/services/embed",
                                      "POST /v1/services application/yaml"}));

  r = Run({"service", "apply", "-f", file});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "service embed unchanged (revision 3f2a9c1d0b7e, port 30000)\n");

  const std::string changed =
      TempFile("svc2.yaml", std::string(kSpec) + "env: {MODEL: e5}\n");
  r = Run({"service", "apply", "-f", changed});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "service embed updated (revision 77aa00bb11cc, port 30000)\n");

  // -o json: the server's answer.
  r = Run({"service", "apply", "-f", changed, "-o", "json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out)["generation"], 2);
  r = Run({"service", "apply", "-f", changed, "-o", "yaml"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("name: embed\n"));
}

TEST_F(ServiceVerbTest, ApplyFailures) {
  // An unreadable file: 2, named, nothing sent.
  CliResult r = Run({"service", "apply", "-f", "/nonexistent/svc.yaml"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err,
            "loom service apply: cannot read /nonexistent/svc.yaml: No such "
            "file or directory\n");
  r = Run({"service", "apply", "-f", "/tmp"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot read /tmp: Is a directory"));
  // A bad spec: 2, with the file, line and column; nothing sent.
  const std::string bad = TempFile(
      "bad.yaml", "kind: service\nname: embed\nreplicas: 5000\ncommand: x\n");
  r = Run({"service", "apply", "-f", bad});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, StartsWith("loom service apply: " + bad + ":3:"));
  EXPECT_THAT(r.err, HasSubstr("5000"));
  // No -f: CLI11's usage error.
  EXPECT_EQ(Run({"service", "apply"}).rc, 2);
  EXPECT_TRUE(sent_.empty());
  // What the server refuses: 1, its message.
  const std::string taken = TempFile(
      "taken.yaml", "kind: service\nname: taken\ncommand: x\nport: 30000\n");
  r = Run({"service", "apply", "-f", taken});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err,
            "loom service apply: port: 30000 is the port of service embed\n");
  // No server: 1.
  const testing::RefusingPort refusing;
  env_["LOOM_SERVER"] = refusing.url();
  r = Run({"service", "apply", "-f", taken});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot reach the loom server"));
}

TEST_F(ServiceVerbTest, ListAndShow) {
  services_["embed"] = SampleService();
  CliResult r = Run({"service", "list"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("NAME   USER   PROJECT  PORT   READY  DESIRED "
                                " REVISION      STATUS\n"
                                "embed  carol  search   30000  1      2 (1-8) "
                                " 3f2a9c1d0b7e  rolling out"));
  r = Run({"service", "list", "-o", "json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out)["services"][0]["name"], "embed");
  // -o before the subcommand, as before any verb.
  r = Run({"service", "-o", "yaml", "list"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("services:\n"));

  r = Run({"service", "show", "embed"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, FormatServiceDetails(SampleService(), kNow));
  r = Run({"service", "show", "embed", "-o", "json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out), SampleService());

  r = Run({"service", "show", "nope"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "loom service show: no service nope\n");
  EXPECT_EQ(Run({"service", "show"}).rc, 2);
}

TEST_F(ServiceVerbTest, ScaleAndDelete) {
  services_["embed"] = SampleService();
  CliResult r = Run({"service", "scale", "embed", "3"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "service embed scaled to 3 replica(s) (1 ready now)\n");
  r = Run({"service", "scale", "embed", "9"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("loom service scale: replicas: must be 1 to 8"));
  r = Run({"service", "scale", "embed", "3", "-o", "json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out)["desired"], 3);
  // Not a count: 2, nothing sent.
  const size_t sent = sent_.size();
  for (const char* n : {"three", "-1", "010x", "1001", ""}) {
    r = Run({"service", "scale", "embed", n});
    EXPECT_EQ(r.rc, 2) << n;
  }
  EXPECT_THAT(Run({"service", "scale", "embed", "x"}).err,
              HasSubstr("replicas: 'x' is not a whole number from 0 to 1000"));
  EXPECT_EQ(Run({"service", "scale", "embed"}).rc, 2);
  EXPECT_EQ(sent_.size(), sent);
  EXPECT_EQ(sent_.back(), R"(POST /v1/services/embed/scale {"replicas":3})");

  r = Run({"service", "delete", "embed"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "service embed is being deleted: its 2 replica(s) drain and stop; "
            "then it is gone\n");
  EXPECT_THAT(Run({"service", "list"}).out,
              HasSubstr("deleting: 2 replica(s) left to drain and stop"));
  r = Run({"service", "delete", "nope"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "loom service delete: no service nope\n");
}

TEST_F(ServiceVerbTest, LogsOfAReplica) {
  services_["embed"] = SampleService();
  // Replica 0 is job 42: its output as `loom logs 42` prints it.
  CliResult r = Run({"service", "logs", "embed"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "line from stdout of task 0\n");
  EXPECT_EQ(r.out, Run({"logs", "42"}).out);
  r = Run({"service", "logs", "embed", "--replica", "0", "--stderr", "-f"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "line from stderr of task 0\n");
  // Replica 1 is job 13, whose node's agent does not answer.
  r = Run({"service", "logs", "embed", "--replica", "1"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err,
            "loom service logs: job 13: the agent of node h200-1 did not "
            "answer: Connection refused\n");
  r = Run({"service", "logs", "embed", "--replica", "2"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err,
            "loom service logs: service embed has 2 replica(s), 0 to 1 (the "
            "rows of `loom service show`); no replica 2\n");
  services_["idle"] = SampleService("idle");
  services_["idle"]["replicas"] = Json::array();
  r = Run({"service", "logs", "idle"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "loom service logs: service idle has no replicas\n");
  r = Run({"service", "logs", "nope"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "loom service logs: no service nope\n");
  // Usage: a bad index, -o.
  r = Run({"service", "logs", "embed", "--replica", "one"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err,
            "loom service logs: --replica: 'one' is not a whole number >= 0\n");
  EXPECT_EQ(Run({"service", "logs", "embed", "-o", "json"}).rc, 2);
  r = Run({"service", "-o", "json", "logs", "embed"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("prints no structured output"));
}

TEST_F(ServiceVerbTest, HelpAndUsage) {
  CliResult r = Run({"service", "--help"});
  EXPECT_EQ(r.rc, 0);
  for (const char* word :
       {"apply", "list", "show", "scale", "delete", "logs", "Exit status"}) {
    EXPECT_THAT(r.out, HasSubstr(word)) << word;
  }
  for (const char* action : {"apply", "list", "show", "scale", "delete"}) {
    r = Run({"service", action, "--help"});
    EXPECT_EQ(r.rc, 0) << action;
    EXPECT_THAT(r.out, HasSubstr("--server")) << action;
    EXPECT_THAT(r.out, HasSubstr("-o,--output")) << action;
    EXPECT_THAT(r.out, HasSubstr("Exit status")) << action;
  }
  r = Run({"service", "logs", "--help"});
  EXPECT_EQ(r.rc, 0);
  for (const char* flag : {"--replica", "--follow", "--stderr", "--server"}) {
    EXPECT_THAT(r.out, HasSubstr(flag)) << flag;
  }
  EXPECT_THAT(Run({"service", "apply", "--help"}).out, HasSubstr("-f,--file"));
  // No action, or an unknown one: 2.
  EXPECT_EQ(Run({"service"}).rc, 2);
  EXPECT_EQ(Run({"service", "restart", "embed"}).rc, 2);
  EXPECT_TRUE(sent_.empty());
}

}  // namespace
}  // namespace loom
