// collie-store, the standalone server program: prints where it listens,
// serves collie clients, stops cleanly on SIGTERM, names a port in use.
#include <catch2/catch.hpp>

#include <signal.h>

#include "collie/base/error.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/test/rendezvous/tcp_store/raw_store_client.h"
#include "collie/test/support/subprocess.h"

namespace collie {
namespace {

using namespace std::chrono_literals;
using test::Subprocess;

const std::string kCollieStore = test::collie_store_path();
using test::listening_port;

TEST_CASE("collie-store: serves, then stops cleanly on SIGTERM or SIGINT", "[tcp_store][cli]") {
  const int sig = GENERATE(SIGTERM, SIGINT);
  auto p = Subprocess::spawn({kCollieStore, "--host", "127.0.0.1", "--port", "0"});
  const uint16_t port = listening_port(p);
  auto a = TcpStore::connect("127.0.0.1", port);
  auto b = TcpStore::connect("127.0.0.1", port);
  a->set("k", "v");
  CHECK(to_string(b->get("k")) == "v");
  CHECK(b->add("n", 2) == 2);
  p.kill(sig);
  auto status = p.wait(30s);
  INFO(p.err());
  CHECK(status.ok());
  CHECK_THAT(p.err(), Catch::Contains("stopped by signal"));
}

TEST_CASE("collie-store: a port in use fails naming it", "[tcp_store][cli]") {
  auto first = Subprocess::spawn({kCollieStore, "--host", "127.0.0.1", "--port", "0"});
  const uint16_t port = listening_port(first);
  auto second =
      Subprocess::spawn({kCollieStore, "--host", "127.0.0.1", "--port", std::to_string(port)});
  auto status = second.wait(30s);
  CHECK(status.exit_code == 1);
  CHECK_THAT(second.err(), Catch::Contains("127.0.0.1:" + std::to_string(port)));
  CHECK_THAT(second.err(), Catch::Contains("in use"));
  first.kill(SIGTERM);
  CHECK(first.wait(30s).ok());
}

TEST_CASE("collie-store: --host prints the address it bound, IPv6 in brackets; '' is refused",
          "[tcp_store][cli]") {
  // "::" and "[::1]" need IPv6 on loopback; "0.0.0.0" always works.
  const auto [given, printed] =
      GENERATE(table<const char*, const char*>({{"0.0.0.0", "collie-store listening on 0.0.0.0:"},
                                                {"::", "collie-store listening on [::]:"},
                                                {"[::1]", "collie-store listening on [::1]:"}}));
  INFO("--host " << given);
  auto p = Subprocess::spawn({kCollieStore, "--host", given, "--port", "0", "--timeout", "0.5"});
  const auto status = p.wait(30s);
  if (std::string(given) != "0.0.0.0" && status.exit_code == 1 &&
      p.err().find("cannot") != std::string::npos) {
    WARN("no IPv6 here: " << p.err());
    return;
  }
  INFO(p.out() << p.err());
  CHECK(status.ok());
  CHECK_THAT(p.out(), Catch::Contains(printed));

  auto empty = Subprocess::spawn({kCollieStore, "--host", "", "--port", "0"});
  CHECK(empty.wait(30s).exit_code == 1);
  CHECK_THAT(empty.err(), Catch::Contains("the host to bind is empty"));
}

TEST_CASE("collie-store: --timeout stops it", "[tcp_store][cli]") {
  auto p =
      Subprocess::spawn({kCollieStore, "--host", "127.0.0.1", "--port", "0", "--timeout", "0.5"});
  listening_port(p);
  CHECK(p.wait(30s).ok());
}

TEST_CASE("collie-store: numbers that do not fit are refused naming the flag and the range",
          "[tcp_store][cli]") {
  const auto [flag, value, range] = GENERATE(table<const char*, const char*, const char*>(
      {{"--max-value-bytes", "18446744073709551615", "1 to 536870912"},
       {"--max-value-bytes", "18446744073709551616", "1 to 536870912"},
       {"--max-value-bytes", "-1", "1 to 536870912"},
       {"--max-value-bytes", "0", "1 to 536870912"},
       {"--max-connections", "99999999999", "1 to 1048576"},
       {"--port", "70000", "0 to 65535"},
       {"--timeout", "1e300", "0 to 31622400"}}));
  INFO(flag << " " << value);
  auto p = Subprocess::spawn({kCollieStore, "--host", "127.0.0.1", flag, value});
  auto status = p.wait(30s);
  CHECK_FALSE(status.ok());
  CHECK(p.out().find("listening") == std::string::npos);
  CHECK_THAT(p.err(), Catch::Contains(flag) && Catch::Contains(value) && Catch::Contains(range));
  // A user-input error, not a bug: no source file in the message.
  CHECK(p.err().find(".cc") == std::string::npos);
}

TEST_CASE("collie-store: --help says how workers reach it and what the job secret does",
          "[tcp_store][cli]") {
  auto p = Subprocess::spawn({kCollieStore, "--help"});
  REQUIRE(p.wait(30s).ok());
  const std::string help = p.out();
  for (const char* needle :
       {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "tcp://", "COLLIE_JOB_SECRET",
        "COLLIE_STORE_COMPAT", "--max-connections", "--handshake-timeout", "--max-unauthenticated"})
    CHECK_THAT(help, Catch::Contains(needle));
}

TEST_CASE("TcpStoreServer and TcpStore refuse options out of range, naming them",
          "[tcp_store][cli]") {
  CHECK_THROWS_MATCHES(
      TcpStoreServer::start({.host = "127.0.0.1", .max_value_bytes = ~size_t{0}}), InvalidArgument,
      Catch::Message("TcpStoreServerOptions::max_value_bytes is 18446744073709551615: allowed 1 "
                     "to 536870912"));
  CHECK_THROWS_WITH(TcpStoreServer::start({.host = "127.0.0.1", .max_connections = 0}),
                    Catch::Contains("TcpStoreServerOptions::max_connections is 0"));
  auto server = TcpStoreServer::start({.host = "127.0.0.1"});
  TcpStoreOptions options;
  options.max_value_bytes = 0;
  CHECK_THROWS_WITH(TcpStore::connect("127.0.0.1", server->port(), options),
                    Catch::Contains("TcpStoreOptions::max_value_bytes is 0: allowed 1 to"));
}

}  // namespace
}  // namespace collie
