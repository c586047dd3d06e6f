#pragma once

// The batch runtime's wire (docs/sbatch.md, "How it runs"): the frames that
// the batch head (node 0's task, which runs the script) exchanges with the
// step hosts (the other nodes' tasks) over TCP and with `srun` over a unix
// socket, and a non-blocking connection that buffers both ways so that one
// slow reader never stalls the head's loop.
//
// A frame is a 4-byte big-endian length (of what follows), a type byte and
// a payload: JSON for control frames, raw bytes after a small header for
// output.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace loom::batch {

// Milliseconds of the monotonic clock, for deadlines.
int64_t MonotonicMs();

enum class FrameType : uint8_t {
  kHello = 1,      // handshake (both ways)
  kLaunch = 2,     // head -> host: start a step's tasks on this node
  kSignal = 3,     // head -> host, srun -> head: signal a step
  kOutput = 4,     // host -> head -> srun: a task's output
  kTaskExit = 5,   // host -> head: a task ended
  kExit = 6,       // head -> host: the job is over, stop everything
  kRun = 7,        // srun -> head: run a step
  kStepStart = 8,  // head -> srun: the step is planned and launched
  kStepExit = 9,   // head -> srun: the step ended, with its exit code
  kError = 10,     // head -> srun: the step could not start
};

// The largest frame accepted: a step's argv and environment fit in it.
inline constexpr size_t kMaxFrameBytes = size_t{4} << 20;

struct Frame {
  FrameType type = FrameType::kHello;
  std::string payload;
};

std::string EncodeFrame(FrameType type, std::string_view payload);
std::string EncodeJsonFrame(FrameType type, const nlohmann::json& body);

// An output frame's payload: step, task (SLURM_PROCID), stream (1 stdout,
// 2 stderr) and the bytes.
struct OutputChunk {
  uint32_t step = 0;
  uint32_t procid = 0;
  uint8_t stream = 1;
  std::string bytes;
};
std::string EncodeOutput(const OutputChunk& chunk);
absl::StatusOr<OutputChunk> DecodeOutput(std::string_view payload);

// A control frame's JSON (an object), or InvalidArgument.
absl::StatusOr<nlohmann::json> DecodeJson(const Frame& frame);

// Splits a byte stream into frames.
class FrameReader {
 public:
  void Append(std::string_view bytes) { buffer_.append(bytes); }
  // The next whole frame, nullopt when more bytes are needed, or
  // InvalidArgument for a frame over `kMaxFrameBytes` or of length 0.
  absl::StatusOr<std::optional<Frame>> Next();

 private:
  std::string buffer_;
  size_t offset_ = 0;
};

// A non-blocking socket with a frame reader and an output buffer.
class Conn {
 public:
  explicit Conn(int fd);
  ~Conn();
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  bool wants_write() const { return sent_ < out_.size(); }
  // Bytes queued and not written yet.
  size_t pending() const { return out_.size() - sent_; }
  void Send(std::string frame);
  // Writes what the socket takes now. False when the peer is gone.
  bool Flush();
  // Reads what is there into the frame reader. False on EOF or an error.
  bool Fill();
  absl::StatusOr<std::optional<Frame>> Next() { return reader_.Next(); }
  // Blocks (up to `timeout_ms`) until everything queued is written.
  void Drain(int timeout_ms);
  void Close();

 private:
  int fd_;
  FrameReader reader_;
  std::string out_;
  size_t sent_ = 0;
};

// The most bytes of tasks' output a connection queues for a reader that
// does not keep up (an `srun` whose stdout is not read, a slow head).
inline constexpr size_t kMaxOutputBacklog = size_t{16} << 20;

// Output to one reader, bounded: a chunk that finds `backlog` bytes or more
// queued on `conn` is dropped and counted; the next chunk that fits is
// preceded by a line on that task's stderr saying how many bytes were lost
// ("loom: 1048576 bytes of output dropped: the reader did not keep up").
// Tasks never block on a slow reader, and memory stays bounded.
class OutputSender {
 public:
  explicit OutputSender(size_t backlog = kMaxOutputBacklog)
      : backlog_(backlog) {}
  void Send(Conn& conn, const OutputChunk& chunk);
  uint64_t dropped_total() const { return dropped_total_; }

 private:
  const size_t backlog_;
  uint64_t dropped_ = 0;  // since the last notice
  uint64_t dropped_total_ = 0;
};

// Sockets. Each returns a close-on-exec descriptor or an error naming the
// address.
absl::StatusOr<int> ListenTcp(const std::string& host, int port);
absl::StatusOr<int> ConnectTcp(const std::string& host, int port);
absl::StatusOr<int> ListenUnix(const std::string& path);
absl::StatusOr<int> ConnectUnix(const std::string& path);
// A TCP port that is free on this machine now (bound to port 0, then
// released), for a step's MASTER_PORT.
absl::StatusOr<int> FreeTcpPort();

// Reads one frame from a blocking `fd` within `timeout_ms` (handshakes).
absl::StatusOr<Frame> ReadFrameBlocking(int fd, FrameReader& reader,
                                        int timeout_ms);
// Writes all of `data` to `fd`, waiting up to `timeout_ms` in all.
absl::Status WriteAllBlocking(int fd, std::string_view data, int timeout_ms);

}  // namespace loom::batch
