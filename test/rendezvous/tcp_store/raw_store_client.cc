#include "collie/test/rendezvous/tcp_store/raw_store_client.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <regex>

#include "collie/base/str_cat.h"
#include "collie/rendezvous/tcp_store/store_protocol.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"

namespace collie::test {

using namespace std::chrono_literals;

StoreSocket raw_connect(uint16_t port) {
  StoreSocket s;
  IoResult r = StoreSocket::connect("127.0.0.1", port, Clock::now() + 30s, &s);
  REQUIRE(r.ok());
  return s;
}

void send_raw(StoreSocket& s, const Bytes& b) {
  (void)s.send_all(b.data(), b.size(), Clock::now() + 10s);
}

bool closed_by_server(StoreSocket& s) {
  uint8_t byte;
  IoResult r = s.recv_exact(&byte, 1, Clock::now() + 10s);
  return r.kind == IoResult::Kind::kClosed;
}

Bytes v2_hello(uint32_t nonce) {
  Bytes b;
  store_protocol::Writer(b).u8(0).u32(store_protocol::kValidationMagic).u8(13).u32(nonce);
  return b;
}

void check_still_serving(uint16_t port) {
  auto store = TcpStore::connect("127.0.0.1", port);
  const int64_t n = store->add("healthy", 1);
  CHECK(n >= 1);
  store->set("after", "ok");
  CHECK(to_string(store->get("after")) == "ok");
}

size_t resident_kib(pid_t pid, const std::string& field) {
  std::ifstream status(pid > 0 ? str_cat("/proc/", pid, "/status") : "/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoul(line.substr(field.size() + 1));
  return 0;
}

std::string collie_store_path() { return std::string(COLLIE_BIN_DIR) + "/collie-store"; }

uint16_t listening_port(Subprocess& p) {
  const std::string out = p.wait_for_output("\n", 30s);
  std::smatch m;
  REQUIRE(
      std::regex_search(out, m, std::regex("collie-store listening on 127\\.0\\.0\\.1:(\\d+)")));
  return static_cast<uint16_t>(std::stoi(m[1]));
}

Subprocess start_collie_store(const std::vector<std::string>& args, uint16_t* port,
                              const SpawnOptions& options) {
  std::vector<std::string> argv = {collie_store_path(), "--host", "127.0.0.1", "--port", "0"};
  argv.insert(argv.end(), args.begin(), args.end());
  Subprocess p = Subprocess::spawn(argv, options);
  *port = listening_port(p);
  return p;
}

}  // namespace collie::test
