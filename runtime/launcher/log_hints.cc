#include "collie/runtime/launcher/log_hints.h"

#include <unistd.h>

#include <charconv>
#include <mutex>
#include <optional>

#include "collie/base/str_cat.h"
#include "collie/runtime/launcher/socket_owner.h"
#include "collie/runtime/launcher/worker_stream.h"

namespace collie::launcher {
namespace {

std::mutex hints_mutex;
std::vector<std::string> hints;

// The port of the "host:port" that ends right before `end` in `line`.
std::optional<uint16_t> port_before(std::string_view line, size_t end) {
  const size_t colon = line.rfind(':', end - 1);
  if (colon == std::string_view::npos || colon + 1 >= end) return std::nullopt;
  unsigned port = 0;
  const char* first = line.data() + colon + 1;
  if (std::from_chars(first, line.data() + end, port).ec != std::errc() || port > 0xffff)
    return std::nullopt;
  return static_cast<uint16_t>(port);
}

// The store's refusal of a torch client, as a line that names the worker
// and says what to do: "TcpStoreServer 127.0.0.1:P: dropping connection
// from 127.0.0.1:Q: refused: a torch 2.x client ..." -> "rank 1 (pid 123)
// is a torch TCPStore client ...". Looked up while the client still holds
// the connection (the store logs before it closes it).
std::optional<std::string> torch_refusal(std::string_view line) {
  if (line.find("a torch 2.x client") == std::string_view::npos &&
      line.find("a torch 1.13 client") == std::string_view::npos)
    return std::nullopt;
  const size_t server = line.find("TcpStoreServer ");
  const size_t dropping = line.find(": dropping connection from ");
  const size_t refused = line.find(": refused: ");
  if (server == std::string_view::npos || dropping == std::string_view::npos ||
      refused == std::string_view::npos || refused < dropping)
    return std::nullopt;
  const std::optional<uint16_t> store_port = port_before(line, dropping);
  const std::optional<uint16_t> client_port = port_before(line, refused);
  std::string who = "a worker";
  if (store_port && client_port) {
    if (std::optional<pid_t> pid = descendant_holding_socket(*client_port, *store_port)) {
      const std::optional<int> rank = rank_of_process(*pid);
      who = rank ? str_cat("rank ", *rank, " (pid ", *pid, ")") : str_cat("pid ", *pid);
    }
  }
  const size_t from = dropping + std::string_view(": dropping connection from ").size();
  return str_cat(who, " is a torch TCPStore client without the job secret (its connection from ",
                 line.substr(from, refused - from),
                 " was refused): run collie-run with --store-compat "
                 "(or COLLIE_STORE_COMPAT=1); the agent store then also serves clients without "
                 "the secret, that is anyone who can reach it (docs/security.md)");
}

}  // namespace

void collect_hint(LogLevel level, std::string_view line) {
  if (level < LogLevel::kWarn || line.find("--store-compat") == std::string_view::npos) return;
  {
    std::lock_guard<std::mutex> lock(hints_mutex);
    if (!hints.empty()) return;  // the first one says it all
  }
  // Without the "[collie] W 12:00:00.000 tcp_store_server.cc:12] " prefix.
  const size_t first = line.find("] ");
  const size_t second = first == std::string_view::npos ? first : line.find("] ", first + 2);
  if (second != std::string_view::npos) line.remove_prefix(second + 2);
  // For a torch worker, first the line that names it and says what to do,
  // then the store's own.
  std::vector<std::string> found;
  if (std::optional<std::string> torch = torch_refusal(line)) {
    write_all(STDERR_FILENO, str_cat("collie-run: ", *torch, "\n"));
    found.push_back(std::move(*torch));
  }
  found.emplace_back(line);
  std::lock_guard<std::mutex> lock(hints_mutex);
  if (hints.empty()) hints = std::move(found);
}

std::vector<std::string> collected_hints() {
  std::lock_guard<std::mutex> lock(hints_mutex);
  return hints;
}

}  // namespace collie::launcher
