// A delaying TCP proxy, the stand-in for tc netem (which this kernel lacks).
// It runs inside a network namespace where an nftables rule redirects the
// ranks' outgoing connections to it (`redirect to :<port>`, skipping the
// proxy's own marked sockets); it finds the real destination with
// SO_ORIGINAL_DST, connects there, and forwards each chunk in both
// directions once it is `delay` old, so every proxied connection gains
// 2 x delay of round-trip time while the byte stream is untouched.
#include <arpa/inet.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/test/support/child.h"

using namespace collie;

namespace {

constexpr int kProxyMark = 0x2a;  // the nftables rule skips packets with this mark

// One direction: a reader stamps chunks as they arrive, a writer sends each
// when it is due. EOF or an error on either side shuts both sockets down.
void pump(int from, int to, std::chrono::milliseconds delay) {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<Clock::time_point, std::vector<char>>> queue;
  bool done = false;
  std::thread writer([&] {
    for (;;) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done || !queue.empty(); });
      if (queue.empty()) return;
      auto [at, chunk] = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      std::this_thread::sleep_until(at + delay);  // the injected delay itself
      for (size_t off = 0; off < chunk.size();) {
        ssize_t n = ::send(to, chunk.data() + off, chunk.size() - off, MSG_NOSIGNAL);
        if (n <= 0) {
          ::shutdown(from, SHUT_RDWR);
          return;
        }
        off += static_cast<size_t>(n);
      }
    }
  });
  std::vector<char> buf(1 << 16);
  for (;;) {
    ssize_t n = ::recv(from, buf.data(), buf.size(), 0);
    if (n <= 0) break;
    std::lock_guard<std::mutex> lock(mu);
    queue.emplace_back(Clock::now(), std::vector<char>(buf.begin(), buf.begin() + n));
    cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    cv.notify_one();
  }
  writer.join();
  ::shutdown(to, SHUT_WR);
}

}  // namespace

// args: delay in ms. Prints "port=<p>" then one "proxied <addr>" line per
// connection; runs until killed.
COLLIE_TEST_CHILD(delay_proxy) {
  const std::chrono::milliseconds delay(std::stoi(args.at(0)));
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 ||
      ::listen(listener, 64) != 0)
    throw NetworkError("delay_proxy: cannot listen");
  socklen_t len = sizeof any;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&any), &len);
  std::printf("port=%u\n", static_cast<unsigned>(ntohs(any.sin_port)));
  std::fflush(stdout);
  for (;;) {
    int client = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    sockaddr_in dst{};
    socklen_t dlen = sizeof dst;
    if (::getsockopt(client, SOL_IP, SO_ORIGINAL_DST, &dst, &dlen) != 0) {
      ::close(client);
      continue;
    }
    int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int mark = kProxyMark;
    ::setsockopt(upstream, SOL_SOCKET, SO_MARK, &mark, sizeof mark);
    if (::connect(upstream, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) {
      ::close(client);
      ::close(upstream);
      continue;
    }
    char ip[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &dst.sin_addr, ip, sizeof ip);
    std::printf("proxied %s:%u\n", ip, static_cast<unsigned>(ntohs(dst.sin_port)));
    std::fflush(stdout);
    std::thread([client, upstream, delay] {
      std::thread back([=] { pump(upstream, client, delay); });
      pump(client, upstream, delay);
      back.join();
      ::close(client);
      ::close(upstream);
    }).detach();
  }
}
