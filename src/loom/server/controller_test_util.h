#pragma once

// Helpers shared by the controller's tests (controller_test.cc,
// job_limits_test.cc, job_events_store_test.cc).

#include <string>

#include "gtest/gtest.h"
#include "loom/core/job_spec.h"
#include "nlohmann/json.hpp"

namespace loom::testing {

// A job spec from YAML; a parse error fails the test.
inline JobSpec Spec(const std::string& yaml) {
  absl::StatusOr<JobSpec> s = ParseJobSpec(yaml, "test.yaml");
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : JobSpec();
}

// The registration body of an emulated node with 8 H200 GPUs.
inline nlohmann::json EmulatedNode(
    const std::string& name, const std::string& address,
    nlohmann::json tasks = nlohmann::json::array()) {
  nlohmann::json gpus = nlohmann::json::array();
  for (int i = 0; i < 8; ++i) gpus.push_back({{"index", i}, {"model", "h200"}});
  return {{"name", name},
          {"address", address},
          {"gpus", gpus},
          {"emulated", true},
          {"tasks", std::move(tasks)}};
}

}  // namespace loom::testing
