// split_host_port: the one "host:port" parser behind init_method URLs,
// --rdzv-endpoint and the data plane's records.
#include <catch2/catch.hpp>

#include "collie/base/error.h"
#include "collie/base/host_port.h"

using namespace collie;
using Catch::Matchers::Contains;

TEST_CASE("split_host_port: names, IPv4 and bracketed IPv6, with and without a port",
          "[host_port]") {
  struct Row {
    const char* text;
    PortRule rule;
    const char* host;
    const char* port;
  };
  for (const Row& r : std::initializer_list<Row>{
           {"node0:29500", PortRule::kRequired, "node0", "29500"},
           {"10.0.0.7:1", PortRule::kRequired, "10.0.0.7", "1"},
           {"[::1]:29500", PortRule::kRequired, "::1", "29500"},
           {"[fd00::1]:5000", PortRule::kOptional, "fd00::1", "5000"},
           {"node0", PortRule::kOptional, "node0", ""},
           {"[fd00::1]", PortRule::kOptional, "fd00::1", ""},
           {"fd00::1", PortRule::kOptional, "fd00::1", ""},  // a bare IPv6 literal: no port
           {"h:http", PortRule::kRequired, "h", "http"},     // the port is the caller's to check
       }) {
    INFO(r.text);
    const HostPort hp = split_host_port(r.text, r.rule);
    CHECK(hp.host == r.host);
    CHECK(hp.port == r.port);
  }
}

TEST_CASE("split_host_port: what is wrong is named", "[host_port]") {
  auto error = [](const char* text, PortRule rule) {
    try {
      split_host_port(text, rule);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error("[::1:29500", PortRule::kRequired),
             Contains("'[::1:29500' has '[' but no closing ']'"));
  CHECK_THAT(error("[::1]29500", PortRule::kRequired),
             Contains("unexpected '29500' after host '[::1]'"));
  CHECK_THAT(error("[::1]", PortRule::kRequired), Contains("missing port after host '[::1]'"));
  CHECK_THAT(error("node0", PortRule::kRequired), Contains("missing port after host 'node0'"));
  CHECK_THAT(error("node0:", PortRule::kOptional), Contains("missing port after host 'node0'"));
  CHECK_THAT(error(":29500", PortRule::kRequired), Contains("missing host"));
  CHECK_THAT(error("", PortRule::kOptional), Contains("missing host"));
  CHECK_THAT(error("[]:1", PortRule::kRequired), Contains("missing host"));
  CHECK_THAT(error("::1:29500", PortRule::kRequired),
             Contains("looks like an IPv6 address: put it in brackets"));
}

TEST_CASE("strip_brackets", "[host_port]") {
  CHECK(strip_brackets("[::1]") == "::1");
  CHECK(strip_brackets("::1") == "::1");
  CHECK(strip_brackets("node0") == "node0");
  CHECK(strip_brackets("[") == "[");
}
