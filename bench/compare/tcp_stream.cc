// tcp_stream: T, what one loopback TCP stream moves, the ceiling every
// socket-based all_reduce on this machine is measured against (a ring of N
// ranks on one host cannot beat about T/N bus bandwidth: every byte crosses
// the kernel twice on the same cores). One thread writes BYTES in 4 MiB
// writes, another reads them; also prints a memcpy rate for scale.
//
// Usage: tcp_stream [BYTES] [REPEATS]   -> "tcp_stream_gbps X" and "memcpy_gbps Y"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

double stream_once(size_t total) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) die("bind");
  if (::listen(listener, 1) != 0) die("listen");
  socklen_t len = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);

  constexpr size_t kChunk = size_t{4} << 20;
  std::thread writer([&] {
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) die("connect");
    std::vector<char> buf(kChunk, 1);
    for (size_t sent = 0; sent < total;) {
      ssize_t n = ::send(s, buf.data(), std::min(kChunk, total - sent), 0);
      if (n <= 0) die("send");
      sent += static_cast<size_t>(n);
    }
    ::close(s);
  });
  int r = ::accept(listener, nullptr, nullptr);
  std::vector<char> buf(kChunk);
  auto start = std::chrono::steady_clock::now();
  for (size_t got = 0; got < total;) {
    ssize_t n = ::recv(r, buf.data(), kChunk, 0);
    if (n <= 0) die("recv");
    got += static_cast<size_t>(n);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  writer.join();
  ::close(r);
  ::close(listener);
  return total / s / 1e9;
}

double memcpy_rate(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes);
  std::memcpy(b.data(), a.data(), bytes);  // fault the pages in
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) std::memcpy(b.data(), a.data(), bytes);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 5.0 * bytes / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : size_t{1} << 30;
  int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
  double best = 0;
  for (int i = 0; i < repeats; ++i) best = std::max(best, stream_once(bytes));
  std::printf("tcp_stream_gbps %.3f\n", best);
  std::printf("memcpy_gbps %.3f\n", memcpy_rate(size_t{256} << 20));
  return 0;
}
