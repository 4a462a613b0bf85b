#include "collie/base/host_port.h"

#include <algorithm>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie {

HostPort split_host_port(std::string_view text, PortRule rule) {
  HostPort out;
  bool has_port = false;
  if (text.starts_with('[')) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos)
      throw InvalidArgument(str_cat("'", text, "' has '[' but no closing ']'"));
    out.host = std::string(text.substr(1, close - 1));
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':')
        throw InvalidArgument(str_cat("unexpected '", rest, "' after host '[", out.host, "]'"));
      out.port = std::string(rest.substr(1));
      has_port = true;
    }
    if (out.host.empty()) throw InvalidArgument("missing host (nothing inside '[]')");
  } else {
    const auto colons = std::count(text.begin(), text.end(), ':');
    if (colons == 1) {
      const size_t colon = text.find(':');
      out.host = std::string(text.substr(0, colon));
      out.port = std::string(text.substr(colon + 1));
      has_port = true;
    } else if (colons > 1 && rule == PortRule::kRequired) {
      throw InvalidArgument(str_cat("host '", text,
                                    "' looks like an IPv6 address: put it in brackets, e.g. "
                                    "[::1]:29500"));
    } else {
      out.host = std::string(text);  // a name, an IPv4 literal or a bare IPv6 literal
    }
    if (out.host.empty()) throw InvalidArgument("missing host");
  }
  const bool v6 = out.host.find(':') != std::string::npos;
  if (out.port.empty() && (has_port || rule == PortRule::kRequired)) {
    throw InvalidArgument(
        str_cat("missing port after host '", v6 ? str_cat("[", out.host, "]") : out.host, "'"));
  }
  return out;
}

std::string_view strip_brackets(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    return host.substr(1, host.size() - 2);
  return host;
}

}  // namespace collie
