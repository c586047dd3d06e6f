// Fault injection (fault_injector.h) on emulated nodes, without an agent:
// what each fault changes, on which nodes, and that a body with anything
// wrong changes nothing. (`exit` is left out: it kills the process.)

#include "loom/agent/fault_injector.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_node.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/node_table.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using json = nlohmann::json;
using agent_testing::CapturedLog;
using agent_testing::FakeNodes;
using agent_testing::TempDir;
using ::testing::HasSubstr;

class FaultInjectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nodes_ = FakeNodes(dir_.path(), {"a-0", "a-1"}, log_.log());
    ASSERT_NE(nodes_, nullptr);
    faults_ = std::make_unique<FaultInjector>(
        *nodes_, /*emulated=*/true,
        [this](AgentNode& node) { ++reports_[node.name]; }, log_.log());
  }

  AgentNode& node(size_t i) { return *nodes_->nodes()[i]; }
  absl::StatusOr<size_t> Apply(const json& body, const std::string& node = "") {
    field_.clear();
    return faults_->Apply(body, node, &field_);
  }
  // No fault on any node, no delay, nobody told.
  void ExpectNothingChanged() {
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_FALSE(node(i).drop_heartbeats.load()) << i;
      EXPECT_EQ(node(i).failed_gpus.load(), 0u) << i;
    }
    EXPECT_EQ(faults_->api_delay_ms(), 0);
    EXPECT_TRUE(reports_.empty());
  }

  TempDir dir_;
  CapturedLog log_;
  std::unique_ptr<NodeTable> nodes_;
  std::unique_ptr<FaultInjector> faults_;
  std::map<std::string, int> reports_;
  std::string field_;
};

TEST_F(FaultInjectorTest, AnUnknownFaultIsNamedAndChangesNothing) {
  absl::StatusOr<size_t> r =
      Apply(json{{"drop_heartbeats", true}, {"explode", 1}});
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_EQ(field_, "explode");
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("unknown fault 'explode'"));
  ExpectNothingChanged();

  for (const json& none : {json::object(), json{{"node", "a-0"}}}) {
    r = Apply(none);
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << none.dump();
    EXPECT_EQ(field_, "body");
  }
  ExpectNothingChanged();
}

TEST_F(FaultInjectorTest, ABadValueAfterAGoodOneChangesNothing) {
  // Each body has a good fault and a bad one: the good one must not happen
  // either.
  const std::vector<std::pair<json, std::string>> bad = {
      {json{{"drop_heartbeats", true}, {"fail_gpu", 8}}, "fail_gpu"},
      {json{{"drop_heartbeats", true}, {"fail_gpu", "x"}}, "fail_gpu"},
      {json{{"fail_gpu", 1}, {"heal_gpu", -1}}, "heal_gpu"},
      {json{{"clear", true}, {"delay_ms", -1}}, "delay_ms"},
      {json{{"delay_ms", 100}, {"drop_heartbeats", "yes"}}, "drop_heartbeats"},
      {json{{"delay_ms", 100}, {"fail_gpu", 0}, {"node", "a-9"}}, "node"},
      {json{{"delay_ms", 60001}}, "delay_ms"},
      {json{{"delay_ms", 1.5}}, "delay_ms"},
      {json{{"clear", 1}}, "clear"},
  };
  for (const auto& [body, field] : bad) {
    absl::StatusOr<size_t> r = Apply(body);
    EXPECT_FALSE(r.ok()) << body.dump();
    EXPECT_EQ(field_, field) << body.dump();
    ExpectNothingChanged();
  }
  absl::StatusOr<size_t> r = Apply(json{{"fail_gpu", 8}});
  EXPECT_EQ(std::string(r.status().message()),
            "fail_gpu: must be a GPU index from 0 to 7");
  EXPECT_TRUE(absl::IsNotFound(
      Apply(json{{"node", "a-9"}, {"drop_heartbeats", true}}).status()));
}

TEST_F(FaultInjectorTest, RealGpusCannotFail) {
  FaultInjector real(
      *nodes_, /*emulated=*/false,
      [this](AgentNode& node) { ++reports_[node.name]; }, log_.log());
  for (const char* key : {"fail_gpu", "heal_gpu"}) {
    std::string field;
    absl::StatusOr<size_t> r = real.Apply(json{{key, 0}}, "", &field);
    EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
    EXPECT_EQ(field, key);
  }
  ExpectNothingChanged();
  // The other faults work as on emulated GPUs.
  std::string field;
  absl::StatusOr<size_t> r =
      real.Apply(json{{"drop_heartbeats", true}}, "", &field);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(node(0).drop_heartbeats.load());
}

TEST_F(FaultInjectorTest, FailAndHealGpus) {
  absl::StatusOr<size_t> r = Apply(json{{"fail_gpu", 3}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 2u);  // every node
  EXPECT_EQ(node(0).failed_gpus.load(), 1u << 3);
  EXPECT_EQ(node(1).failed_gpus.load(), 1u << 3);
  EXPECT_EQ(reports_, (std::map<std::string, int>{{"a-0", 1}, {"a-1", 1}}));

  r = Apply(json{{"fail_gpu", 5}, {"node", "a-1"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 1u);
  EXPECT_EQ(node(0).failed_gpus.load(), 1u << 3);
  EXPECT_EQ(node(1).failed_gpus.load(), (1u << 3) | (1u << 5));
  EXPECT_EQ(reports_["a-1"], 2);

  r = Apply(json{{"heal_gpu", 3}}, "a-1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(node(0).failed_gpus.load(), 1u << 3);
  EXPECT_EQ(node(1).failed_gpus.load(), 1u << 5);
  EXPECT_EQ(reports_, (std::map<std::string, int>{{"a-0", 1}, {"a-1", 3}}));
  EXPECT_EQ(log_.LinesWith("fault injection: GPU 3 healthy again"), 1);

  // Both at once: one fails, the other heals.
  r = Apply(json{{"fail_gpu", 0}, {"heal_gpu", 5}}, "a-1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(node(1).failed_gpus.load(), 1u << 0);
}

TEST_F(FaultInjectorTest, ClearUndoesEveryFault) {
  ASSERT_TRUE(
      Apply(json{{"drop_heartbeats", true}, {"fail_gpu", 2}, {"delay_ms", 300}})
          .ok());
  EXPECT_TRUE(node(0).drop_heartbeats.load());
  EXPECT_TRUE(node(1).drop_heartbeats.load());
  EXPECT_EQ(faults_->api_delay_ms(), 300);
  reports_.clear();
  absl::StatusOr<size_t> r = Apply(json{{"clear", true}});
  ASSERT_TRUE(r.ok()) << r.status();
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_FALSE(node(i).drop_heartbeats.load());
    EXPECT_EQ(node(i).failed_gpus.load(), 0u);
  }
  EXPECT_EQ(faults_->api_delay_ms(), 0);
  EXPECT_EQ(reports_, (std::map<std::string, int>{{"a-0", 1}, {"a-1", 1}}));
  // `clear: false` clears nothing (but is a fault given).
  ASSERT_TRUE(Apply(json{{"delay_ms", 10}}).ok());
  ASSERT_TRUE(Apply(json{{"clear", false}}).ok());
  EXPECT_EQ(faults_->api_delay_ms(), 10);
}

TEST_F(FaultInjectorTest, TheQueryNamesTheNodeBeforeTheBody) {
  absl::StatusOr<size_t> r =
      Apply(json{{"drop_heartbeats", true}, {"node", "a-1"}}, "a-0");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 1u);
  EXPECT_TRUE(node(0).drop_heartbeats.load());
  EXPECT_FALSE(node(1).drop_heartbeats.load());

  r = Apply(json{{"drop_heartbeats", true}, {"node", "a-1"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(node(1).drop_heartbeats.load());

  r = Apply(json{{"drop_heartbeats", false}}, "a-1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(node(0).drop_heartbeats.load());
  EXPECT_FALSE(node(1).drop_heartbeats.load());
  EXPECT_EQ(log_.LinesWith("fault injection: heartbeats resume"), 1);

  r = Apply(json{{"drop_heartbeats", true}}, "a-9");
  EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
  EXPECT_EQ(field_, "node");
  EXPECT_TRUE(reports_.empty());  // heartbeats are no health
}

}  // namespace
}  // namespace loom
