// The one parser of the addresses collie reads ("host:port" in init_method
// URLs, --rdzv-endpoint, the data plane's published records): a name or an
// IPv4 literal, "host:port", "[v6]:port", "[v6]", and, where the port is
// optional, a bare IPv6 literal ("fd00::1"). IPv6 with a port needs the
// brackets, as in URLs.
#pragma once

#include <string>
#include <string_view>

namespace collie {

struct HostPort {
  std::string host;  // without brackets
  std::string port;  // the text after the colon, unchecked; "" when none was given
};

enum class PortRule { kRequired, kOptional };

// Throws InvalidArgument saying what is wrong with `text`, without saying
// where it came from (the caller prefixes that):
//   "'[::1:29500' has '[' but no closing ']'"
//   "unexpected '29500' after host '[::1]'"
//   "missing host", "missing port after host 'node0'" (kRequired, or "node0:")
//   "host '::1:29500' looks like an IPv6 address: put it in brackets, e.g.
//    [::1]:29500" (kRequired)
HostPort split_host_port(std::string_view text, PortRule rule);

// "[::1]" -> "::1"; anything else as it is.
std::string_view strip_brackets(std::string_view host);

}  // namespace collie
