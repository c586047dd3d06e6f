#pragma once

// The handshake between the batch head and a step host (docs/sbatch.md,
// "Security"): both prove they hold the job's token (LOOM_TOKEN, which
// every task of the run gets when the server has auth on) with an
// HMAC-SHA-256 over the other side's fresh nonce, so that neither a stray
// process nor another job can join the allocation or feed it commands.
// Without a token (a server without auth) both sides skip the proof.

#include <string>

#include "absl/status/statusor.h"
#include "loom/batch/batch_wire.h"

namespace loom::batch {

// How long the head waits for the hosts, and a host for the head, at the
// job's start.
inline constexpr int kBatchJoinTimeoutMs = 120'000;

// Who a step host says it is.
struct HostHello {
  int index = 0;  // its task index (NODE_RANK), 1..N-1
  std::string node;
  std::string host;
};

// The head's side, on a freshly accepted (blocking) connection.
absl::StatusOr<HostHello> AcceptHost(int fd, const std::string& token,
                                     uint64_t job_id, int timeout_ms);
// The host's side, on a freshly connected (blocking) connection.
absl::Status JoinHead(int fd, const std::string& token, uint64_t job_id,
                      const HostHello& me, int timeout_ms);

}  // namespace loom::batch
