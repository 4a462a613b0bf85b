// CommunicatorOptions::from_env: the one place the collectives read the
// environment.
#include <cstdlib>
#include <string>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/parse_duration.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/communicator.h"

namespace collie {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// A byte count from `lo` to `hi` in variable `name`, or InvalidArgument
// naming the variable, the value and what it should be.
size_t parse_bytes(const char* name, const std::string& text, unsigned long long lo,
                   unsigned long long hi, const char* what) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || !end || *end != '\0' || v < lo || v > hi || text[0] == '-')
    throw InvalidArgument(
        str_cat(name, "='", text, "': expected ", what, ", from ", lo, " to ", hi));
  return static_cast<size_t>(v);
}

}  // namespace

CommunicatorOptions CommunicatorOptions::from_env(CommunicatorOptions o) {
  if (o.transport.empty()) o.transport = env("COLLIE_TRANSPORT");
  if (o.host_id.empty()) o.host_id = env("COLLIE_HOST_ID");
  if (o.interface.empty()) o.interface = env("COLLIE_SOCKET_IFNAME");
  if (o.route_host.empty()) o.route_host = env("MASTER_ADDR");
  if (const std::string bytes = env("COLLIE_SHM_BYTES"); o.shm_buffer_bytes == 0 && !bytes.empty())
    o.shm_buffer_bytes = parse_bytes("COLLIE_SHM_BYTES", bytes, 4096, 1ull << 34,
                                     "the bytes of each shared-memory ring");
  if (const std::string bytes = env("COLLIE_HIERARCHICAL_SMALL_BYTES"); !bytes.empty())
    o.hierarchical_small_bytes =
        parse_bytes("COLLIE_HIERARCHICAL_SMALL_BYTES", bytes, 0, 1ull << 30,
                    "the size up to which all_reduce across hosts exchanges in one hop");
  if (const std::string bytes = env("COLLIE_P2P_SINGLE_COPY_BYTES"); !bytes.empty())
    o.p2p_single_copy_bytes =
        parse_bytes("COLLIE_P2P_SINGLE_COPY_BYTES", bytes, 0, 1ull << 40,
                    "the size from which a send on one host is read from the sender's memory");
  if (env("COLLIE_HIERARCHICAL") == "0") o.hierarchical = false;
  if (const std::string after = env("COLLIE_REPORT_AFTER"); !after.empty())
    o.report_after = parse_duration(after, "COLLIE_REPORT_AFTER");
  return o;
}

CommunicatorOptions CommunicatorOptions::from_env() { return from_env(CommunicatorOptions()); }

}  // namespace collie

namespace collie {

std::shared_ptr<P2PBatch> Communicator::post_p2p(std::span<const P2POp> ops,
                                                 const Deadline& deadline) {
  auto batch = std::make_shared<P2PBatch>();
  batch->sources = send_recv(ops, deadline);
  batch->done = true;
  return batch;
}

void Communicator::wait_p2p(P2PBatch& batch, const Deadline& deadline) {
  (void)deadline;
  COLLIE_CHECK(batch.done, "a point-to-point batch of a communicator that runs them at once");
}

}  // namespace collie
