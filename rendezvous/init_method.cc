#include "collie/rendezvous/init_method.h"

#include <vector>

#include "collie/base/error.h"
#include "collie/base/host_port.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/file_store.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"

namespace collie {
namespace {

// Collects the URL for messages: every error names the whole URL and the part
// that is wrong.
class UrlParser {
 public:
  explicit UrlParser(std::string_view url) : url_(url) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidArgument(str_cat("init_method '", url_, "': ", what));
  }

  // Runs a parse that may throw InvalidArgument and prefixes its message.
  template <typename F>
  auto with_context(F&& parse) const {
    try {
      return parse();
    } catch (const InvalidArgument& e) {
      fail(e.what());
    }
  }

  void parse_query(std::string_view query, InitMethod& out) const {
    while (!query.empty()) {
      size_t amp = query.find('&');
      std::string_view item = query.substr(0, amp);
      query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
      if (item.empty()) fail("empty query parameter (a stray '&' or '?')");
      size_t eq = item.find('=');
      std::string key(item.substr(0, eq));
      if (eq == std::string_view::npos) fail(str_cat("query parameter '", key, "' has no value"));
      std::string value(item.substr(eq + 1));
      if (key == "rank") {
        if (out.rank_given) fail("query parameter 'rank' is given twice");
        out.rank = with_context([&] { return detail::parse_non_negative("rank", value); });
        out.rank_given = true;
      } else if (key == "world_size") {
        if (out.world_size_given) fail("query parameter 'world_size' is given twice");
        out.world_size =
            with_context([&] { return detail::parse_non_negative("world_size", value); });
        out.world_size_given = true;
      } else {
        fail(str_cat("unknown query parameter '", key, "' (expected rank and world_size)"));
      }
    }
  }

  // host:port, [v6]:port; an optional trailing '/'.
  void parse_authority(std::string_view body, InitMethod& out) const {
    if (body.ends_with('/')) body.remove_suffix(1);
    const HostPort hp = with_context([&] { return split_host_port(body, PortRule::kRequired); });
    out.host = hp.host;
    out.port = with_context([&] { return detail::parse_port("port", hp.port); });
  }

  void parse_env(std::string_view body, const EnvLookup& env, InitMethod& out) const {
    if (!body.empty())
      fail(str_cat("env:// takes no host or path (got '", body,
                   "'); the address comes from MASTER_ADDR and MASTER_PORT"));
    auto addr = env("MASTER_ADDR");
    if (!addr) fail("MASTER_ADDR is not set (env:// needs MASTER_ADDR and MASTER_PORT)");
    const std::string_view host = strip_brackets(*addr);
    if (host.empty()) fail(str_cat("MASTER_ADDR='", *addr, "' is empty"));
    out.host = std::string(host);
    auto port = env("MASTER_PORT");
    if (!port) fail("MASTER_PORT is not set (env:// needs MASTER_ADDR and MASTER_PORT)");
    out.port = with_context([&] { return detail::parse_port("MASTER_PORT", *port); });
    // The query overrides the environment, as in torch.
    if (!out.rank_given) {
      if (auto rank = env("RANK")) {
        out.rank = with_context([&] { return detail::parse_non_negative("RANK", *rank); });
        out.rank_given = true;
      }
    }
    if (!out.world_size_given) {
      if (auto size = env("WORLD_SIZE")) {
        out.world_size =
            with_context([&] { return detail::parse_non_negative("WORLD_SIZE", *size); });
        out.world_size_given = true;
      }
    }
  }

  void parse_file(std::string_view body, InitMethod& out) const {
    if (body.empty()) fail("missing path: use file:///absolute/path");
    if (body.front() != '/') {
      std::string_view host = body.substr(0, body.find('/'));
      fail(str_cat("file:// needs an absolute path, file:///path (got host '", host, "')"));
    }
    out.path = std::string(body);
  }

 private:
  std::string url_;
};

void check_consistent(const InitMethod& m, const UrlParser& p) {
  if (m.world_size_given && m.world_size < 1)
    p.fail(str_cat("world_size=", m.world_size, " must be at least 1"));
  if (m.rank_given && m.world_size_given && m.rank >= m.world_size)
    p.fail(str_cat("rank=", m.rank, " is not below world_size=", m.world_size));
  if (m.scheme != InitScheme::kFile && m.port == 0 && m.rank_given && m.rank != 0)
    p.fail(
        str_cat("port 0 (an ephemeral port) only works for rank 0, which hosts the store; "
                "rank ",
                m.rank, " needs the port rank 0 bound"));
}

}  // namespace

const char* to_string(InitScheme scheme) {
  switch (scheme) {
    case InitScheme::kEnv: return "env";
    case InitScheme::kTcp: return "tcp";
    case InitScheme::kFile: return "file";
  }
  return "?";
}

std::string InitMethod::address() const {
  bool v6 = host.find(':') != std::string::npos;
  return v6 ? str_cat("[", host, "]:", port) : str_cat(host, ":", port);
}

void InitMethod::validate_complete() const {
  UrlParser p(url);
  const bool env = scheme == InitScheme::kEnv;
  if (!rank_given)
    p.fail(env ? "the rank is not given: set RANK or add ?rank=N"
               : "the rank is not given: add ?rank=N");
  if (!world_size_given)
    p.fail(env ? "the world size is not given: set WORLD_SIZE or add ?world_size=N"
               : "the world size is not given: add ?world_size=N");
  if (rank < 0) p.fail(str_cat("rank=", rank, " is negative"));
  check_consistent(*this, p);
}

InitMethod parse_init_method(std::string_view url, const EnvLookup& env) {
  UrlParser p(url);
  InitMethod out;
  out.url = std::string(url);
  size_t sep = url.find("://");
  if (sep == std::string_view::npos)
    p.fail("no scheme: expected env://, tcp://host:port or file:///path");
  std::string_view scheme = url.substr(0, sep);
  std::string_view rest = url.substr(sep + 3);
  size_t q = rest.find('?');
  std::string_view body = rest.substr(0, q);
  if (q != std::string_view::npos) p.parse_query(rest.substr(q + 1), out);

  if (scheme == "env") {
    out.scheme = InitScheme::kEnv;
    p.parse_env(body, env, out);
  } else if (scheme == "tcp") {
    out.scheme = InitScheme::kTcp;
    p.parse_authority(body, out);
  } else if (scheme == "file") {
    out.scheme = InitScheme::kFile;
    p.parse_file(body, out);
  } else {
    p.fail(str_cat("unknown scheme '", scheme, "' (expected env, tcp or file)"));
  }
  check_consistent(out, p);
  return out;
}

std::shared_ptr<Store> create_store(const InitMethod& method, Timeout timeout) {
  method.validate_complete();
  if (method.scheme == InitScheme::kFile)
    return std::make_shared<FileStore>(method.path, method.world_size,
                                       FileStoreOptions{.timeout = timeout});
  TcpStoreOptions options;
  options.timeout = timeout;
  return TcpStore::create(method.host, method.port, /*is_master=*/method.rank == 0, options);
}

}  // namespace collie
