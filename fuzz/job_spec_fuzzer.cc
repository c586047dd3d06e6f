// Fuzzes the job spec parser (`ParseJobSpec`): what `loom submit -f` reads
// and what `POST /v1/jobs` accepts as its body, YAML or JSON. Checks the
// parser's contract (job_spec.h): any bytes give a spec or an
// InvalidArgument that names the source (in UTF-8, as the server sends it in
// JSON), never an exception; a spec survives the storage round trip
// unchanged (`JobSpecToJson`, and nlohmann's rewriting of it in a job
// record); resolving it against a cluster (`ToJobRequest`) gives a request
// or an InvalidArgument.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "fuzz/fuzz_check.h"
#include "loom/core/cluster_spec.h"
#include "loom/core/job_spec.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

const Cluster& SmallCluster() {
  static const Cluster* cluster = new Cluster(*ClusterPreset("small"));
  return *cluster;
}

void FuzzOne(std::string_view text) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text, "fuzz");
  if (!spec.ok()) {
    fuzz::CheckErrorCode(spec.status(), {absl::StatusCode::kInvalidArgument},
                         "ParseJobSpec: an error that is not InvalidArgument");
    LOOM_FUZZ_CHECK(absl::StartsWith(spec.status().message(), "fuzz"),
                    spec.status().ToString());
    // The server sends the message in a JSON error body.
    (void)nlohmann::json(std::string(spec.status().message())).dump();
    return;
  }
  const std::string json = JobSpecToJson(*spec);
  absl::StatusOr<JobSpec> again = ParseJobSpec(json, "fuzz");
  LOOM_FUZZ_CHECK(again.ok(), again.status().ToString() + "\n" + json);
  LOOM_FUZZ_CHECK(*again == *spec, "round trip changed the spec:\n" + json +
                                       "\n" + JobSpecToJson(*again));
  // The server stores the spec inside a job record: parsed by nlohmann,
  // written out again with the record, read back with `ParseJobSpec`
  // (src/loom/server/job_record.cc).
  const nlohmann::json parsed = nlohmann::json::parse(json, nullptr, false);
  LOOM_FUZZ_CHECK(!parsed.is_discarded() && parsed.is_object(),
                  "JobSpecToJson wrote what nlohmann cannot read:\n" + json);
  const std::string stored = parsed.dump();
  absl::StatusOr<JobSpec> loaded = ParseJobSpec(stored, "fuzz");
  LOOM_FUZZ_CHECK(loaded.ok(), loaded.status().ToString() + "\n" + stored);
  LOOM_FUZZ_CHECK(*loaded == *spec,
                  "the stored spec reads back different:\n" + stored);
  absl::StatusOr<JobRequest> req =
      ToJobRequest(*spec, SmallCluster(), 1, absl::UnixEpoch());
  if (!req.ok()) {
    fuzz::CheckErrorCode(req.status(), {absl::StatusCode::kInvalidArgument},
                         "ToJobRequest: an error that is not InvalidArgument");
  }
}

}  // namespace
}  // namespace loom

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::FuzzOne(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
