// The load and the replica of bench/services.sh (bench/README.md, "Services").
//
//   http_load serve HOST PORT
//     a replica: answers every GET with 200 and a short body, HTTP/1.1
//     keep-alive, a thread per connection (no work per request: what is
//     measured is the path to it);
//   http_load load HOST PORT RATE SECONDS CONNECTIONS
//     open-loop load: RATE requests per second in all, spread evenly over
//     CONNECTIONS keep-alive connections, each request sent at its planned
//     time (or at once when the connection is late) and timed from that
//     planned time, so a slow answer is not hidden by fewer requests
//     (coordinated omission). Prints one JSON line: sent, ok, failed,
//     achieved rate, and latency p50/p90/p99/max in microseconds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int Connect(const char* host, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, host, &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Reads one response (headers and a Content-Length body) into `buf`,
// keeping what follows it. Returns the status, or -1.
int ReadResponse(int fd, std::string& buf) {
  for (;;) {
    const size_t end = buf.find("\r\n\r\n");
    if (end != std::string::npos) {
      // Header names in any case: HAProxy sends them in lower case.
      std::string head = buf.substr(0, end);
      std::transform(head.begin(), head.end(), head.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      size_t len = 0;
      const size_t cl = head.find("content-length:");
      if (cl != std::string::npos) len = std::atoi(&head[cl + 15]);
      if (buf.size() >= end + 4 + len) {
        const int status = buf.size() > 12 ? std::atoi(&buf[9]) : -1;
        buf.erase(0, end + 4 + len);
        return status;
      }
    }
    char tmp[4096];
    const ssize_t n = ::read(fd, tmp, sizeof(tmp));
    if (n <= 0) return -1;
    buf.append(tmp, n);
  }
}

int Serve(const char* host, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, host, &a.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::listen(fd, 512) != 0) {
    std::perror("http_load serve: bind/listen");
    return 1;
  }
  std::printf("listening on %s:%d\n", host, port);
  std::fflush(stdout);
  for (;;) {
    const int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    std::thread([c] {
      const int on = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
      static const char kAnswer[] =
          "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
      std::string buf;
      char tmp[4096];
      for (;;) {
        size_t end;
        while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
          const ssize_t n = ::read(c, tmp, sizeof(tmp));
          if (n <= 0) {
            ::close(c);
            return;
          }
          buf.append(tmp, n);
        }
        buf.erase(0, end + 4);
        if (::write(c, kAnswer, sizeof(kAnswer) - 1) < 0) break;
      }
      ::close(c);
    }).detach();
  }
}

int Load(const char* host, int port, double rate, double seconds, int conns) {
  const auto start = Clock::now() + std::chrono::milliseconds(100);
  const auto interval = std::chrono::duration<double>(conns / rate);
  const int per_conn = static_cast<int>(rate * seconds / conns);
  std::vector<std::vector<int64_t>> lat(conns);
  std::atomic<int64_t> failed{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < conns; ++k) {
    threads.emplace_back([&, k] {
      int fd = Connect(host, port);
      std::string buf;
      const std::string req =
          std::string("GET / HTTP/1.1\r\nHost: ") + host + "\r\n\r\n";
      // Connections start staggered over one interval.
      const auto first = start + std::chrono::duration_cast<Clock::duration>(
                                     interval * k / conns);
      for (int i = 0; i < per_conn; ++i) {
        const auto planned =
            first + std::chrono::duration_cast<Clock::duration>(interval * i);
        std::this_thread::sleep_until(planned);
        if (fd < 0) fd = Connect(host, port);
        if (fd < 0 || ::write(fd, req.data(), req.size()) < 0 ||
            ReadResponse(fd, buf) != 200) {
          ++failed;
          if (fd >= 0) ::close(fd);
          fd = -1;
          buf.clear();
          continue;
        }
        lat[k].push_back(std::chrono::duration_cast<std::chrono::microseconds>(
                             Clock::now() - planned)
                             .count());
      }
      if (fd >= 0) ::close(fd);
    });
  }
  for (std::thread& t : threads) t.join();
  const double took =
      std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<int64_t> all;
  for (const auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) -> int64_t {
    if (all.empty()) return -1;
    return all[std::min(all.size() - 1,
                        static_cast<size_t>(p / 100 * all.size()))];
  };
  std::printf(
      "{\"sent\": %lld, \"ok\": %zu, \"failed\": %lld, \"rate\": %.0f, "
      "\"p50_us\": %lld, \"p90_us\": %lld, \"p99_us\": %lld, \"max_us\": "
      "%lld}\n",
      static_cast<long long>(per_conn) * conns, all.size(),
      static_cast<long long>(failed.load()), all.size() / took,
      static_cast<long long>(pct(50)), static_cast<long long>(pct(90)),
      static_cast<long long>(pct(99)),
      static_cast<long long>(all.empty() ? -1 : all.back()));
  return failed.load() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "serve") == 0) {
    return Serve(argv[2], std::atoi(argv[3]));
  }
  if (argc == 7 && std::strcmp(argv[1], "load") == 0) {
    const double rate = std::atof(argv[4]), seconds = std::atof(argv[5]);
    const int conns = std::atoi(argv[6]);
    if (rate <= 0 || seconds <= 0 || conns <= 0) {
      std::fprintf(stderr, "http_load load: RATE, SECONDS, CONNECTIONS > 0\n");
      return 2;
    }
    return Load(argv[2], std::atoi(argv[3]), rate, seconds, conns);
  }
  std::fprintf(stderr,
               "usage: http_load serve HOST PORT\n"
               "       http_load load HOST PORT RATE SECONDS CONNECTIONS\n");
  return 2;
}
