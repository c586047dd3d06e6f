#include "loom/batch/batch_session.h"

#include "absl/strings/str_cat.h"
#include "loom/common/digest.h"

namespace loom::batch {
namespace {

std::string Proof(const std::string& token, std::string_view role,
                  uint64_t job_id, const std::string& nonce) {
  if (token.empty()) return "";
  return HmacSha256Hex(token, absl::StrCat("loom-batch-", std::string(role),
                                           ":", job_id, ":", nonce));
}

absl::StatusOr<nlohmann::json> ReadHello(int fd, FrameReader& reader,
                                         int timeout_ms) {
  absl::StatusOr<Frame> f = ReadFrameBlocking(fd, reader, timeout_ms);
  if (!f.ok()) return f.status();
  if (f->type != FrameType::kHello) {
    return absl::InvalidArgumentError("expected a hello frame");
  }
  return DecodeJson(*f);
}

std::string Text(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

absl::StatusOr<HostHello> AcceptHost(int fd, const std::string& token,
                                     uint64_t job_id, int timeout_ms) {
  const std::string nonce = RandomHex(16);
  if (absl::Status st = WriteAllBlocking(
          fd, EncodeJsonFrame(FrameType::kHello, {{"challenge", nonce}}),
          timeout_ms);
      !st.ok()) {
    return st;
  }
  FrameReader reader;
  absl::StatusOr<nlohmann::json> hello = ReadHello(fd, reader, timeout_ms);
  if (!hello.ok()) return hello.status();
  if (!SecureEquals(Text(*hello, "proof"),
                    Proof(token, "host", job_id, nonce))) {
    (void)WriteAllBlocking(
        fd, EncodeJsonFrame(FrameType::kHello, {{"error", "bad credentials"}}),
        timeout_ms);
    return absl::PermissionDeniedError("bad credentials");
  }
  HostHello h;
  auto index = hello->find("index");
  if (index == hello->end() || !index->is_number_integer()) {
    return absl::InvalidArgumentError("hello without an index");
  }
  h.index = index->get<int>();
  h.node = Text(*hello, "node");
  h.host = Text(*hello, "host");
  const std::string answer =
      Proof(token, "head", job_id, Text(*hello, "challenge"));
  if (absl::Status st = WriteAllBlocking(
          fd, EncodeJsonFrame(FrameType::kHello, {{"proof", answer}}),
          timeout_ms);
      !st.ok()) {
    return st;
  }
  return h;
}

absl::Status JoinHead(int fd, const std::string& token, uint64_t job_id,
                      const HostHello& me, int timeout_ms) {
  FrameReader reader;
  absl::StatusOr<nlohmann::json> challenge = ReadHello(fd, reader, timeout_ms);
  if (!challenge.ok()) return challenge.status();
  const std::string nonce = RandomHex(16);
  if (absl::Status st = WriteAllBlocking(
          fd,
          EncodeJsonFrame(FrameType::kHello,
                          {{"index", me.index},
                           {"node", me.node},
                           {"host", me.host},
                           {"challenge", nonce},
                           {"proof", Proof(token, "host", job_id,
                                           Text(*challenge, "challenge"))}}),
          timeout_ms);
      !st.ok()) {
    return st;
  }
  absl::StatusOr<nlohmann::json> answer = ReadHello(fd, reader, timeout_ms);
  if (!answer.ok()) return answer.status();
  if (const std::string error = Text(*answer, "error"); !error.empty()) {
    return absl::PermissionDeniedError(absl::StrCat("the head said: ", error));
  }
  if (!SecureEquals(Text(*answer, "proof"),
                    Proof(token, "head", job_id, nonce))) {
    return absl::PermissionDeniedError(
        "the head could not prove it holds the job's token");
  }
  return absl::OkStatus();
}

}  // namespace loom::batch
