// Fuzzes the cluster spec parser (`ParseClusterSpec`, docs/cluster-spec.md):
// any bytes give a cluster or an InvalidArgument naming the source, never an
// exception. A cluster it accepts must be usable: a plain job spec resolves
// against it (`ToJobRequest`) to a request or an InvalidArgument.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "fuzz/fuzz_check.h"
#include "loom/core/cluster_spec.h"
#include "loom/core/job_spec.h"

namespace loom {
namespace {

void FuzzOne(std::string_view text) {
  absl::StatusOr<Cluster> cluster = ParseClusterSpec(text, "fuzz");
  if (!cluster.ok()) {
    fuzz::CheckErrorCode(cluster.status(), {absl::StatusCode::kInvalidArgument},
                         "ParseClusterSpec: an error that is not "
                         "InvalidArgument");
    LOOM_FUZZ_CHECK(absl::StartsWith(cluster.status().message(), "fuzz"),
                    cluster.status().ToString());
    return;
  }
  for (const char* shape :
       {"resources: {gpus_per_task: 1}", "resources: {gpus: 16, nodes: 2}"}) {
    absl::StatusOr<JobSpec> spec = ParseJobSpec(
        absl::StrCat("name: probe\ncommand: [true]\n", shape, "\n"), "probe");
    LOOM_FUZZ_CHECK(spec.ok(), spec.status().ToString());
    absl::StatusOr<JobRequest> req =
        ToJobRequest(*spec, *cluster, 1, absl::UnixEpoch());
    if (!req.ok()) {
      fuzz::CheckErrorCode(req.status(), {absl::StatusCode::kInvalidArgument},
                           "ToJobRequest: an error that is not "
                           "InvalidArgument");
    }
  }
}

}  // namespace
}  // namespace loom

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::FuzzOne(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
