// CommunicatorOptions::from_env: the one place the collectives read the
// environment.
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "base/parse_duration.h"
#include "base/str_cat.h"
#include "collectives/communicator.h"

namespace collie {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

size_t parse_shm_bytes(const std::string& text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || !end || *end != '\0' || v < 4096 || v > (1ull << 34) || text[0] == '-')
    throw InvalidArgument(str_cat("COLLIE_SHM_BYTES='", text,
                                  "': expected the bytes of each shared-memory ring, from 4096 "
                                  "to 2^34"));
  return static_cast<size_t>(v);
}

}  // namespace

CommunicatorOptions CommunicatorOptions::from_env(CommunicatorOptions o) {
  if (o.transport.empty()) o.transport = env("COLLIE_TRANSPORT");
  if (o.host_id.empty()) o.host_id = env("COLLIE_HOST_ID");
  if (o.interface.empty()) o.interface = env("COLLIE_SOCKET_IFNAME");
  if (o.route_host.empty()) o.route_host = env("MASTER_ADDR");
  if (const std::string bytes = env("COLLIE_SHM_BYTES"); o.shm_buffer_bytes == 0 && !bytes.empty())
    o.shm_buffer_bytes = parse_shm_bytes(bytes);
  if (env("COLLIE_HIERARCHICAL") == "0") o.hierarchical = false;
  if (const std::string after = env("COLLIE_REPORT_AFTER"); !after.empty())
    o.report_after = parse_duration(after, "COLLIE_REPORT_AFTER");
  return o;
}

CommunicatorOptions CommunicatorOptions::from_env() { return from_env(CommunicatorOptions()); }

}  // namespace collie
