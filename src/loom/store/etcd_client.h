#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace httplib {
class Client;
}

namespace loom {

struct EtcdClientOptions {
  // Client URLs of the etcd members ("http://127.0.0.1:2379"); at least one.
  std::vector<std::string> endpoints;
  // Longest wait for one unary call (connect + answer).
  absl::Duration timeout = absl::Seconds(5);
};

// A client of etcd v3's JSON gateway (the grpc-gateway that etcd serves on
// its client port): each call POSTs a JSON body to `/v3/<service>/<method>`.
// Why the gateway rather than gRPC: cpp-httplib is already a dependency, and
// Debian's gRPC needs the 460 MB golang-etcd-server-dev for etcd's protos;
// the gateway carries the same messages (docs/store.md has the mapping).
//
// Conventions of the gateway that this class hides: bytes fields are base64
// (`Encode`/`Decode`), int64 fields come back as strings (`Int`), fields with
// default values are left out of answers, and errors are
// `{"error", "code", "message"}` with gRPC codes, which map one-to-one onto
// `absl::StatusCode`.
//
// Endpoints: calls go to one endpoint until it cannot be reached, then to the
// next one (round robin), so a cluster that lost a minority of its members
// keeps serving. A call is tried again on another endpoint only when the
// connection could not be made (the request was not sent), never after it
// may have been applied.
//
// Thread-safe: keeps a small pool of keep-alive connections.
class EtcdClient {
 public:
  // `InvalidArgument` for no endpoints or a malformed URL.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(
      EtcdClientOptions options);
  ~EtcdClient();

  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // POSTs `body` to `path` ("/v3/kv/range") and returns the parsed answer.
  // Errors: etcd's own (its gRPC code, its message), `Unavailable` when no
  // endpoint answers or an answer is not JSON.
  absl::StatusOr<nlohmann::json> Call(std::string_view path,
                                      const nlohmann::json& body);

  // A streaming call (`/v3/watch`): POSTs `body` and hands every JSON message
  // of the answer to `on_message` until it returns false, the stream ends or
  // `deadline` passes (then `DeadlineExceeded`). OK when `on_message`
  // stopped it.
  absl::Status Stream(
      std::string_view path, const nlohmann::json& body, absl::Time deadline,
      const std::function<bool(const nlohmann::json&)>& on_message);

  // The endpoint calls currently go to.
  std::string CurrentEndpoint() const;

  static std::string Encode(std::string_view bytes);
  // The bytes of a base64 field; "" when absent. `DataLoss` if not base64.
  static absl::StatusOr<std::string> Decode(const nlohmann::json& parent,
                                            const char* field);
  // An int64 field given as a string or a number; 0 when absent or garbled.
  static int64_t Int(const nlohmann::json& parent, const char* field);

 private:
  explicit EtcdClient(EtcdClientOptions options);

  std::unique_ptr<httplib::Client> TakeConnection(size_t endpoint);
  void ReturnConnection(size_t endpoint, std::unique_ptr<httplib::Client> c);

  const EtcdClientOptions options_;
  mutable absl::Mutex mu_;
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;
  // Idle keep-alive connections, per endpoint.
  std::vector<std::vector<std::unique_ptr<httplib::Client>>> idle_
      ABSL_GUARDED_BY(mu_);
};

// Comma-separated etcd client URLs ("http://h:p,http://h:p") to a list;
// `InvalidArgument` naming the bad entry.
absl::StatusOr<std::vector<std::string>> ParseEtcdEndpoints(
    std::string_view list);

}  // namespace loom
