#include "loom/batch/batch_wire.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "loom/batch/batch_head.h"
#include "loom/batch/batch_session.h"
#include "loom/common/digest.h"

namespace loom::batch {
namespace {

using ::testing::HasSubstr;

int64_t WireTestNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A connected pair of blocking unix stream sockets, closed at the end
// unless released.
struct WireTestPair {
  WireTestPair() {
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd), 0);
  }
  ~WireTestPair() {
    for (int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
  int Release(int i) {
    const int f = fd[i];
    fd[i] = -1;
    return f;
  }
  int fd[2] = {-1, -1};
};

// A temporary directory, removed with what it holds.
class WireTestTempDir {
 public:
  WireTestTempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "loom-wire-test-XXXXXX")
            .string();
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
    EXPECT_FALSE(path_.empty());
  }
  ~WireTestTempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string WireTestHeader(uint32_t len) {
  std::string s;
  s.push_back(static_cast<char>(len >> 24));
  s.push_back(static_cast<char>(len >> 16));
  s.push_back(static_cast<char>(len >> 8));
  s.push_back(static_cast<char>(len));
  return s;
}

// The next frame of `reader`, failing the test when there is none.
Frame WireTestNext(FrameReader& reader) {
  absl::StatusOr<std::optional<Frame>> f = reader.Next();
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok() || !f->has_value()) {
    ADD_FAILURE() << "no frame";
    return Frame{};
  }
  return **f;
}

bool WireTestNoFrame(FrameReader& reader) {
  absl::StatusOr<std::optional<Frame>> f = reader.Next();
  return f.ok() && !f->has_value();
}

// Flushes `from` and fills `to` until `to` yields a frame or `timeout_ms`
// passes.
std::optional<Frame> WireTestPump(Conn& from, Conn& to, int timeout_ms) {
  const int64_t end = WireTestNowMs() + timeout_ms;
  while (WireTestNowMs() < end) {
    absl::StatusOr<std::optional<Frame>> f = to.Next();
    EXPECT_TRUE(f.ok()) << f.status();
    if (!f.ok()) return std::nullopt;
    if (f->has_value()) return **f;
    EXPECT_TRUE(from.Flush());
    pollfd p{to.fd(), POLLIN, 0};
    ::poll(&p, 1, 10);
    EXPECT_TRUE(to.Fill());
  }
  return std::nullopt;
}

bool WireTestCloexec(int fd) {
  const int flags = ::fcntl(fd, F_GETFD);
  return flags >= 0 && (flags & FD_CLOEXEC) != 0;
}

TEST(Frames, EncodeLayout) {
  const std::string f = EncodeFrame(FrameType::kRun, "abc");
  EXPECT_EQ(f, WireTestHeader(4) + std::string("\x07"
                                               "abc",
                                               4));
  EXPECT_EQ(EncodeFrame(FrameType::kExit, ""),
            WireTestHeader(1) + std::string("\x06", 1));
}

TEST(Frames, RoundTrip) {
  FrameReader reader;
  const std::string binary("a\0b\xff\n", 5);
  reader.Append(EncodeFrame(FrameType::kSignal, binary));
  Frame f = WireTestNext(reader);
  EXPECT_EQ(f.type, FrameType::kSignal);
  EXPECT_EQ(f.payload, binary);
  EXPECT_TRUE(WireTestNoFrame(reader));

  // An empty payload.
  reader.Append(EncodeFrame(FrameType::kExit, ""));
  f = WireTestNext(reader);
  EXPECT_EQ(f.type, FrameType::kExit);
  EXPECT_EQ(f.payload, "");
  EXPECT_TRUE(WireTestNoFrame(reader));
}

TEST(Frames, SplitAcrossReads) {
  const std::string payload(1000, 'x');
  const std::string bytes = EncodeFrame(FrameType::kLaunch, payload);
  FrameReader reader;
  // One byte at a time: no frame until the last byte.
  for (size_t i = 0; i + 1 < bytes.size(); ++i) {
    reader.Append(bytes.substr(i, 1));
    ASSERT_TRUE(WireTestNoFrame(reader)) << "at byte " << i;
  }
  reader.Append(bytes.substr(bytes.size() - 1));
  Frame f = WireTestNext(reader);
  EXPECT_EQ(f.type, FrameType::kLaunch);
  EXPECT_EQ(f.payload, payload);
  EXPECT_TRUE(WireTestNoFrame(reader));
}

TEST(Frames, SeveralInOneBuffer) {
  std::string bytes = EncodeFrame(FrameType::kHello, "one") +
                      EncodeFrame(FrameType::kRun, "") +
                      EncodeFrame(FrameType::kError, "three");
  const std::string fourth = EncodeFrame(FrameType::kStepExit, "four");
  bytes += fourth.substr(0, 6);  // and part of a fourth
  FrameReader reader;
  reader.Append(bytes);
  Frame f = WireTestNext(reader);
  EXPECT_EQ(f.type, FrameType::kHello);
  EXPECT_EQ(f.payload, "one");
  f = WireTestNext(reader);
  EXPECT_EQ(f.type, FrameType::kRun);
  EXPECT_EQ(f.payload, "");
  f = WireTestNext(reader);
  EXPECT_EQ(f.type, FrameType::kError);
  EXPECT_EQ(f.payload, "three");
  EXPECT_TRUE(WireTestNoFrame(reader));
  reader.Append(fourth.substr(6));
  f = WireTestNext(reader);
  EXPECT_EQ(f.type, FrameType::kStepExit);
  EXPECT_EQ(f.payload, "four");
  EXPECT_TRUE(WireTestNoFrame(reader));
}

TEST(Frames, ManyFramesWithAPartialTail) {
  // Enough frames that the reader drops what it has consumed while a
  // partial frame is still buffered.
  FrameReader reader;
  std::string bytes;
  for (int i = 0; i < 200; ++i) {
    bytes += EncodeFrame(
        FrameType::kOutput,
        std::to_string(i) + std::string(1000, static_cast<char>('a' + i % 26)));
  }
  const std::string last = EncodeFrame(FrameType::kTaskExit, "last");
  reader.Append(bytes + last.substr(0, 7));
  for (int i = 0; i < 200; ++i) {
    Frame f = WireTestNext(reader);
    ASSERT_EQ(
        f.payload,
        std::to_string(i) + std::string(1000, static_cast<char>('a' + i % 26)));
  }
  EXPECT_TRUE(WireTestNoFrame(reader));
  reader.Append(last.substr(7));
  Frame f = WireTestNext(reader);
  EXPECT_EQ(f.type, FrameType::kTaskExit);
  EXPECT_EQ(f.payload, "last");
}

TEST(Frames, SizeLimit) {
  // The largest frame is accepted.
  {
    FrameReader reader;
    const std::string payload(kMaxFrameBytes - 1, 'z');
    reader.Append(EncodeFrame(FrameType::kLaunch, payload));
    Frame f = WireTestNext(reader);
    EXPECT_EQ(f.payload.size(), kMaxFrameBytes - 1);
  }
  // One byte more is refused from its header alone.
  {
    FrameReader reader;
    reader.Append(WireTestHeader(static_cast<uint32_t>(kMaxFrameBytes + 1)) +
                  "\x02");
    absl::StatusOr<std::optional<Frame>> f = reader.Next();
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(f.status().message(), HasSubstr("4194305 bytes"));
  }
  {
    FrameReader reader;
    reader.Append(WireTestHeader(0xffffffffu));
    EXPECT_FALSE(reader.Next().ok());
  }
  // A frame of length 0 has no type: refused.
  {
    FrameReader reader;
    reader.Append(WireTestHeader(0) + EncodeFrame(FrameType::kRun, "x"));
    absl::StatusOr<std::optional<Frame>> f = reader.Next();
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  }
  // A short header is just incomplete.
  {
    FrameReader reader;
    reader.Append(std::string("\0\0", 2));
    EXPECT_TRUE(WireTestNoFrame(reader));
  }
}

TEST(Output, RoundTrip) {
  OutputChunk c;
  c.step = 0xdeadbeef;
  c.procid = 0x80000001;
  c.stream = 2;
  c.bytes = std::string("line\0\xff\x80 end\n", 12);
  FrameReader reader;
  reader.Append(EncodeOutput(c));
  Frame f = WireTestNext(reader);
  EXPECT_EQ(f.type, FrameType::kOutput);
  EXPECT_EQ(f.payload.size(), 9 + c.bytes.size());
  absl::StatusOr<OutputChunk> d = DecodeOutput(f.payload);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->step, 0xdeadbeefu);
  EXPECT_EQ(d->procid, 0x80000001u);
  EXPECT_EQ(d->stream, 2);
  EXPECT_EQ(d->bytes, c.bytes);

  // Stdout, no bytes.
  reader.Append(EncodeOutput({7, 3, 1, ""}));
  d = DecodeOutput(WireTestNext(reader).payload);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->step, 7u);
  EXPECT_EQ(d->procid, 3u);
  EXPECT_EQ(d->stream, 1);
  EXPECT_EQ(d->bytes, "");
}

TEST(Output, MalformedPayloadsRefused) {
  EXPECT_FALSE(DecodeOutput("").ok());
  EXPECT_FALSE(DecodeOutput(std::string(8, '\0')).ok());
  std::string header = WireTestHeader(1) + WireTestHeader(2);
  for (char stream : {'\0', '\3', '\xff'}) {
    absl::StatusOr<OutputChunk> d = DecodeOutput(header + stream + "x");
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(DecodeOutput(header + '\1').ok());
}

TEST(Json, DecodesObjectsOnly) {
  FrameReader reader;
  reader.Append(EncodeJsonFrame(FrameType::kRun,
                                {{"command", {"hostname", "-f"}}, {"n", 2}}));
  Frame f = WireTestNext(reader);
  EXPECT_EQ(f.type, FrameType::kRun);
  absl::StatusOr<nlohmann::json> j = DecodeJson(f);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["n"], 2);
  EXPECT_EQ((*j)["command"][1], "-f");

  for (const char* garbage : {"", "not json", "{\"a\":", "[1,2]", "42",
                              "\"text\"", "null", "{} trailing"}) {
    absl::StatusOr<nlohmann::json> bad =
        DecodeJson(Frame{FrameType::kLaunch, garbage});
    ASSERT_FALSE(bad.ok()) << garbage;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(bad.status().message(), HasSubstr("type 2"));
  }
}

TEST(Json, InvalidUtf8IsReplacedNotThrown) {
  std::string frame;
  EXPECT_NO_THROW(frame = EncodeJsonFrame(FrameType::kRun,
                                          {{"arg", std::string("a\xff")}}));
  FrameReader reader;
  reader.Append(frame);
  absl::StatusOr<nlohmann::json> j = DecodeJson(WireTestNext(reader));
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["arg"], "a\xEF\xBF\xBD");
}

TEST(Conn, SendAndReceiveOverASocketpair) {
  WireTestPair p;
  Conn a(p.Release(0));
  Conn b(p.Release(1));
  EXPECT_TRUE(a.open());
  EXPECT_NE(::fcntl(a.fd(), F_GETFL) & O_NONBLOCK, 0);
  // Nothing there yet: Fill is fine and there is no frame.
  EXPECT_TRUE(b.Fill());
  absl::StatusOr<std::optional<Frame>> none = b.Next();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  a.Send(EncodeJsonFrame(FrameType::kStepStart, {{"step", 1}}));
  a.Send(EncodeOutput({1, 0, 1, "hello\n"}));
  EXPECT_FALSE(a.wants_write());  // small frames go out at once
  std::optional<Frame> f = WireTestPump(a, b, 2000);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->type, FrameType::kStepStart);
  f = WireTestPump(a, b, 2000);
  ASSERT_TRUE(f.has_value());
  ASSERT_EQ(f->type, FrameType::kOutput);
  absl::StatusOr<OutputChunk> c = DecodeOutput(f->payload);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->bytes, "hello\n");

  // And the other way.
  b.Send(EncodeFrame(FrameType::kSignal, "x"));
  f = WireTestPump(b, a, 2000);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->type, FrameType::kSignal);
}

TEST(Conn, BuffersWhatTheSocketDoesNotTake) {
  WireTestPair p;
  Conn a(p.Release(0));
  Conn b(p.Release(1));
  // Far more than a socket buffer holds: Send must not block.
  const std::string big(3 << 20, 'b');
  const int64_t start = WireTestNowMs();
  a.Send(EncodeFrame(FrameType::kLaunch, big));
  a.Send(EncodeFrame(FrameType::kExit, "after"));
  EXPECT_LT(WireTestNowMs() - start, 1000);
  EXPECT_TRUE(a.wants_write());
  std::optional<Frame> f = WireTestPump(a, b, 10000);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->type, FrameType::kLaunch);
  EXPECT_EQ(f->payload, big);
  // Queued behind it, in order.
  f = WireTestPump(a, b, 2000);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->type, FrameType::kExit);
  EXPECT_EQ(f->payload, "after");
  EXPECT_FALSE(a.wants_write());
}

TEST(Conn, DrainGivesUpAtItsDeadline) {
  WireTestPair p;
  Conn a(p.Release(0));
  a.Send(EncodeFrame(FrameType::kLaunch, std::string(3 << 20, 'd')));
  ASSERT_TRUE(a.wants_write());
  // Nobody reads the other end.
  const int64_t start = WireTestNowMs();
  a.Drain(100);
  const int64_t took = WireTestNowMs() - start;
  EXPECT_GE(took, 90);
  EXPECT_LT(took, 2000);
  EXPECT_TRUE(a.wants_write());
}

TEST(Conn, DrainWritesEverythingToAReader) {
  WireTestPair p;
  Conn a(p.Release(0));
  const int reader_fd = p.fd[1];
  const std::string big(2 << 20, 'r');
  a.Send(EncodeFrame(FrameType::kLaunch, big));
  absl::StatusOr<Frame> got = absl::UnknownError("not read");
  std::thread t([&] {
    FrameReader reader;
    got = ReadFrameBlocking(reader_fd, reader, 10000);
  });
  a.Drain(10000);
  EXPECT_FALSE(a.wants_write());
  t.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->payload, big);
}

TEST(Conn, PeerCloseDetected) {
  WireTestPair p;
  Conn a(p.Release(0));
  // The peer writes a frame and goes away: the frame is still read, then
  // Fill says the connection is over.
  ASSERT_TRUE(
      WriteAllBlocking(p.fd[1], EncodeFrame(FrameType::kExit, "bye"), 1000)
          .ok());
  ::close(p.Release(1));
  bool alive = true;
  const int64_t end = WireTestNowMs() + 2000;
  while (alive && WireTestNowMs() < end) {
    pollfd pfd{a.fd(), POLLIN, 0};
    ::poll(&pfd, 1, 100);
    alive = a.Fill();
  }
  EXPECT_FALSE(alive);
  absl::StatusOr<std::optional<Frame>> f = a.Next();
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(f->has_value());
  EXPECT_EQ((*f)->payload, "bye");
  // Writing to it fails (and raises no SIGPIPE).
  a.Send(EncodeFrame(FrameType::kRun, "x"));
  EXPECT_FALSE(a.Flush());
}

TEST(Conn, Close) {
  WireTestPair p;
  Conn a(p.Release(0));
  a.Close();
  EXPECT_FALSE(a.open());
  EXPECT_EQ(a.fd(), -1);
  a.Send(EncodeFrame(FrameType::kRun, "x"));  // dropped
  EXPECT_FALSE(a.wants_write());
  EXPECT_FALSE(a.Flush());
  EXPECT_FALSE(a.Fill());
  // The peer sees the end.
  char c;
  EXPECT_EQ(::read(p.fd[1], &c, 1), 0);
}

TEST(Sockets, TcpOnLoopback) {
  absl::StatusOr<int> port = FreeTcpPort();
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  EXPECT_LT(*port, 65536);
  absl::StatusOr<int> listener = ListenTcp("127.0.0.1", *port);
  ASSERT_TRUE(listener.ok()) << listener.status();
  EXPECT_TRUE(WireTestCloexec(*listener));
  absl::StatusOr<int> client = ConnectTcp("127.0.0.1", *port);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE(WireTestCloexec(*client));
  const int server = ::accept4(*listener, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(server, 0);

  ASSERT_TRUE(
      WriteAllBlocking(*client, EncodeFrame(FrameType::kHello, "hi"), 1000)
          .ok());
  FrameReader reader;
  absl::StatusOr<Frame> f = ReadFrameBlocking(server, reader, 2000);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->type, FrameType::kHello);
  EXPECT_EQ(f->payload, "hi");
  for (int fd : {server, *client, *listener}) ::close(fd);

  // Nobody listens there any more.
  absl::StatusOr<int> refused = ConnectTcp("127.0.0.1", *port);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.status().message(),
              HasSubstr(absl::StrCat("127.0.0.1:", *port)));
}

TEST(Sockets, TcpPortInUseIsAnError) {
  absl::StatusOr<int> listener = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(*listener, reinterpret_cast<sockaddr*>(&addr), &len),
            0);
  const int port = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  absl::StatusOr<int> again = ListenTcp("127.0.0.1", port);
  EXPECT_FALSE(again.ok());
  if (again.ok()) ::close(*again);
  ::close(*listener);
}

TEST(Sockets, UnixInATempDir) {
  WireTestTempDir dir;
  const std::string path = dir.path() + "/batch.sock";
  absl::StatusOr<int> listener = ListenUnix(path);
  ASSERT_TRUE(listener.ok()) << listener.status();
  EXPECT_TRUE(WireTestCloexec(*listener));
  EXPECT_TRUE(std::filesystem::is_socket(path));
  absl::StatusOr<int> client = ConnectUnix(path);
  ASSERT_TRUE(client.ok()) << client.status();
  const int server = ::accept4(*listener, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(server, 0);
  {
    Conn c(*client);
    Conn s(server);
    c.Send(EncodeJsonFrame(FrameType::kRun, {{"command", {"true"}}}));
    std::optional<Frame> f = WireTestPump(c, s, 2000);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->type, FrameType::kRun);
  }
  ::close(*listener);

  // A stale socket file is replaced.
  listener = ListenUnix(path);
  ASSERT_TRUE(listener.ok()) << listener.status();
  ::close(*listener);

  absl::StatusOr<int> missing = ConnectUnix(dir.path() + "/nope.sock");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope.sock"));

  const std::string long_path = dir.path() + "/" + std::string(200, 'l');
  absl::StatusOr<int> too_long = ListenUnix(long_path);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ConnectUnix(long_path).ok());
}

TEST(ReadFrameBlocking, TimesOut) {
  WireTestPair p;
  FrameReader reader;
  const int64_t start = WireTestNowMs();
  absl::StatusOr<Frame> f = ReadFrameBlocking(p.fd[0], reader, 100);
  const int64_t took = WireTestNowMs() - start;
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(took, 90);
  EXPECT_LT(took, 2000);

  // Half a frame is no frame either.
  const std::string frame = EncodeFrame(FrameType::kHello, "half");
  ASSERT_TRUE(WriteAllBlocking(p.fd[1], frame.substr(0, 5), 1000).ok());
  f = ReadFrameBlocking(p.fd[0], reader, 100);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDeadlineExceeded);
  // The rest completes it.
  ASSERT_TRUE(WriteAllBlocking(p.fd[1], frame.substr(5), 1000).ok());
  f = ReadFrameBlocking(p.fd[0], reader, 1000);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->payload, "half");
}

TEST(ReadFrameBlocking, BufferedFramesAndPeerClose) {
  WireTestPair p;
  ASSERT_TRUE(WriteAllBlocking(p.fd[1],
                               EncodeFrame(FrameType::kHello, "1") +
                                   EncodeFrame(FrameType::kHello, "2"),
                               1000)
                  .ok());
  ::close(p.Release(1));
  FrameReader reader;
  absl::StatusOr<Frame> f = ReadFrameBlocking(p.fd[0], reader, 1000);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->payload, "1");
  f = ReadFrameBlocking(p.fd[0], reader, 1000);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->payload, "2");
  const int64_t start = WireTestNowMs();
  f = ReadFrameBlocking(p.fd[0], reader, 5000);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(WireTestNowMs() - start, 2000);  // at once, not at the deadline
}

TEST(ReadFrameBlocking, OversizeFrameRefused) {
  WireTestPair p;
  ASSERT_TRUE(WriteAllBlocking(
                  p.fd[1],
                  WireTestHeader(static_cast<uint32_t>(kMaxFrameBytes + 1)),
                  1000)
                  .ok());
  FrameReader reader;
  absl::StatusOr<Frame> f = ReadFrameBlocking(p.fd[0], reader, 1000);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WriteAllBlocking, TimesOutOnAFullSocket) {
  WireTestPair p;
  ASSERT_EQ(::fcntl(p.fd[0], F_SETFL, O_NONBLOCK), 0);
  const int64_t start = WireTestNowMs();
  absl::Status st = WriteAllBlocking(p.fd[0], std::string(8 << 20, 'w'), 100);
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(WireTestNowMs() - start, 2000);
}

// The handshake (batch_session.h), head and host on the two ends of a
// socketpair, the host in a thread.
struct WireTestHandshake {
  absl::StatusOr<HostHello> head = absl::UnknownError("not run");
  absl::Status host = absl::UnknownError("not run");
};

WireTestHandshake WireTestShake(const std::string& head_token,
                                uint64_t head_job,
                                const std::string& host_token,
                                uint64_t host_job) {
  WireTestPair p;
  WireTestHandshake r;
  const HostHello me{2, "node-c", "gpu4"};
  std::thread host([&] {
    r.host = JoinHead(p.fd[1], host_token, host_job, me, 5000);
    // As the host does on failure: hang up, so the head is not left
    // waiting.
    ::shutdown(p.fd[1], SHUT_RDWR);
  });
  r.head = AcceptHost(p.fd[0], head_token, head_job, 5000);
  ::shutdown(p.fd[0], SHUT_RDWR);
  host.join();
  return r;
}

TEST(Handshake, RightTokenSucceeds) {
  WireTestHandshake r = WireTestShake("tok-123", 77, "tok-123", 77);
  ASSERT_TRUE(r.head.ok()) << r.head.status();
  EXPECT_TRUE(r.host.ok()) << r.host;
  EXPECT_EQ(r.head->index, 2);
  EXPECT_EQ(r.head->node, "node-c");
  EXPECT_EQ(r.head->host, "gpu4");
}

TEST(Handshake, EmptyTokensOnBothSides) {
  WireTestHandshake r = WireTestShake("", 77, "", 77);
  ASSERT_TRUE(r.head.ok()) << r.head.status();
  EXPECT_TRUE(r.host.ok()) << r.host;
  EXPECT_EQ(r.head->index, 2);
}

TEST(Handshake, WrongTokenRefusedOnBothSides) {
  for (const auto& [head_token, host_token] :
       {std::pair<std::string, std::string>{"tok-123", "tok-124"},
        {"tok-123", ""},
        {"", "tok-123"}}) {
    WireTestHandshake r = WireTestShake(head_token, 77, host_token, 77);
    ASSERT_FALSE(r.head.ok()) << head_token << " / " << host_token;
    EXPECT_EQ(r.head.status().code(), absl::StatusCode::kPermissionDenied);
    ASSERT_FALSE(r.host.ok());
    EXPECT_EQ(r.host.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(r.host.message(), HasSubstr("bad credentials"));
  }
}

TEST(Handshake, OtherJobRefused) {
  // The same token does not let a host of job 78 into job 77.
  WireTestHandshake r = WireTestShake("tok-123", 77, "tok-123", 78);
  ASSERT_FALSE(r.head.ok());
  EXPECT_EQ(r.head.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(r.host.ok());
}

TEST(Handshake, OverTcpLoopback) {
  absl::StatusOr<int> listener = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(*listener, reinterpret_cast<sockaddr*>(&addr), &len),
            0);
  const int port = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  absl::Status host = absl::UnknownError("not run");
  std::thread t([&] {
    absl::StatusOr<int> fd = ConnectTcp("127.0.0.1", port);
    if (!fd.ok()) {
      host = fd.status();
      return;
    }
    host = JoinHead(*fd, "tcp-token", 5, HostHello{1, "n1", "h1"}, 5000);
    ::close(*fd);
  });
  pollfd pfd{*listener, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1);
  const int fd = ::accept4(*listener, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(fd, 0);
  absl::StatusOr<HostHello> head = AcceptHost(fd, "tcp-token", 5, 5000);
  t.join();
  ::close(fd);
  ::close(*listener);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_TRUE(host.ok()) << host;
  EXPECT_EQ(head->index, 1);
  EXPECT_EQ(head->node, "n1");
  EXPECT_EQ(head->host, "h1");
}

// A head that does not hold the token cannot make the host believe it
// does: the host checks the head's proof too.
TEST(Handshake, HostRefusesAHeadWithoutTheToken) {
  WireTestPair p;
  absl::Status host = absl::UnknownError("not run");
  std::thread t([&] {
    host = JoinHead(p.fd[1], "tok", 9, HostHello{1, "n1", "h1"}, 5000);
  });
  ASSERT_TRUE(WriteAllBlocking(
                  p.fd[0],
                  EncodeJsonFrame(FrameType::kHello, {{"challenge", "abcd"}}),
                  1000)
                  .ok());
  FrameReader reader;
  absl::StatusOr<Frame> hello = ReadFrameBlocking(p.fd[0], reader, 5000);
  ASSERT_TRUE(hello.ok()) << hello.status();
  absl::StatusOr<nlohmann::json> j = DecodeJson(*hello);
  ASSERT_TRUE(j.ok());
  // The host proved itself over our challenge, and challenges us back.
  EXPECT_EQ((*j)["proof"], HmacSha256Hex("tok", "loom-batch-host:9:abcd"));
  EXPECT_EQ((*j)["index"], 1);
  ASSERT_TRUE((*j)["challenge"].is_string());
  EXPECT_EQ((*j)["challenge"].get<std::string>().size(), 32u);
  // Replaying its own proof back is not an answer.
  ASSERT_TRUE(
      WriteAllBlocking(
          p.fd[0],
          EncodeJsonFrame(FrameType::kHello, {{"proof", (*j)["proof"]}}), 1000)
          .ok());
  t.join();
  ASSERT_FALSE(host.ok());
  EXPECT_EQ(host.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(host.message(), HasSubstr("could not prove"));
}

TEST(Handshake, HeadRefusesAHelloWithoutAnIndex) {
  WireTestPair p;
  std::thread t([&] {
    FrameReader reader;
    if (!ReadFrameBlocking(p.fd[1], reader, 5000).ok()) return;
    (void)WriteAllBlocking(
        p.fd[1], EncodeJsonFrame(FrameType::kHello, {{"node", "n1"}}), 1000);
  });
  absl::StatusOr<HostHello> head = AcceptHost(p.fd[0], "", 9, 5000);
  t.join();
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Handshake, HeadTimesOutOnASilentHost) {
  WireTestPair p;
  const int64_t start = WireTestNowMs();
  absl::StatusOr<HostHello> head = AcceptHost(p.fd[0], "tok", 9, 100);
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(WireTestNowMs() - start, 2000);
}

TEST(OutputSender, DropsWhatAReaderThatDoesNotReadWouldPileUp) {
  WireTestPair p;
  Conn writer(p.Release(0));
  const int reader = p.fd[1];
  OutputSender out(/*backlog=*/256 << 10);
  const std::string chunk(64 << 10, 'x');
  // 64 MiB to a reader that reads nothing: the queue stays near the bound.
  for (int i = 0; i < 1024; ++i) out.Send(writer, {1, 0, 1, chunk});
  EXPECT_LE(writer.pending(), (256u << 10) + chunk.size() + 64);
  EXPECT_GT(out.dropped_total(), 60u << 20);
  // The reader drains the socket; the next chunk comes after a notice of
  // what was lost.
  FrameReader frames;
  std::string notice;
  const int64_t deadline = WireTestNowMs() + 5000;
  bool sent_last = false;
  while (notice.empty() && WireTestNowMs() < deadline) {
    char buf[1 << 16];
    const ssize_t n = ::recv(reader, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) frames.Append(std::string_view(buf, static_cast<size_t>(n)));
    writer.Flush();
    if (!sent_last && writer.pending() == 0) {
      out.Send(writer, {1, 0, 1, "last\n"});
      sent_last = true;
    }
    while (true) {
      absl::StatusOr<std::optional<Frame>> f = frames.Next();
      ASSERT_TRUE(f.ok());
      if (!f->has_value()) break;
      absl::StatusOr<OutputChunk> c = DecodeOutput((*f)->payload);
      ASSERT_TRUE(c.ok());
      if (c->stream == 2) notice = c->bytes;
    }
  }
  EXPECT_THAT(notice, HasSubstr(absl::StrCat(out.dropped_total(),
                                             " bytes of output dropped")));
}

TEST(SweepStaleBatchDirs, RemovesOnlyTheDirsOfKilledHeads) {
  namespace fs = std::filesystem;
  WireTestTempDir tmp;
  const fs::path root = tmp.path();
  const auto old = fs::file_time_type::clock::now() - std::chrono::minutes(5);
  // A head killed with SIGKILL: its socket file stays, no one listens.
  fs::create_directories(root / "loom-batch-7-aaaaaa");
  {
    absl::StatusOr<int> fd =
        ListenUnix((root / "loom-batch-7-aaaaaa" / "srun.sock").string());
    ASSERT_TRUE(fd.ok()) << fd.status();
    ::close(*fd);
  }
  fs::last_write_time(root / "loom-batch-7-aaaaaa", old);
  // A live head: it listens.
  fs::create_directories(root / "loom-batch-8-bbbbbb");
  absl::StatusOr<int> live =
      ListenUnix((root / "loom-batch-8-bbbbbb" / "srun.sock").string());
  ASSERT_TRUE(live.ok()) << live.status();
  fs::last_write_time(root / "loom-batch-8-bbbbbb", old);
  // A head starting now (no socket yet), and something else.
  fs::create_directories(root / "loom-batch-9-cccccc");
  fs::create_directories(root / "other");
  fs::last_write_time(root / "other", old);

  EXPECT_EQ(SweepStaleBatchDirs(root.string(), 60), 1);
  EXPECT_FALSE(fs::exists(root / "loom-batch-7-aaaaaa"));
  EXPECT_TRUE(fs::exists(root / "loom-batch-8-bbbbbb"));
  EXPECT_TRUE(fs::exists(root / "loom-batch-9-cccccc"));
  EXPECT_TRUE(fs::exists(root / "other"));
  ::close(*live);
}

}  // namespace
}  // namespace loom::batch
