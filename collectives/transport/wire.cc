#include "collie/collectives/transport/wire.h"

#include <cstddef>

#include "collie/base/str_cat.h"

namespace collie {

static_assert(offsetof(WireHeader, seq) == 8);
static_assert(offsetof(WireHeader, root) == 24);
static_assert(offsetof(WireHeader, payload_bytes) == 32);
static_assert(offsetof(WireHeader, probe) == 38);

std::string_view to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kReduce: return "reduce";
    case CollectiveKind::kGather: return "gather";
    case CollectiveKind::kScatter: return "scatter";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kPointToPoint: return "send/recv";
  }
  return "invalid-collective";
}

std::string CallInfo::describe() const {
  switch (kind) {
    case CollectiveKind::kBarrier: return "barrier()";
    case CollectiveKind::kBroadcast:
      return str_cat("broadcast(", dtype, ", ", count, ", root ", root, ")");
    case CollectiveKind::kAllGather: return str_cat("all_gather(", dtype, ", ", count, ")");
    case CollectiveKind::kAllReduce:
      return str_cat("all_reduce(", dtype, ", ", count, ", ", op, ", ",
                     to_string(static_cast<AllReduceAlgorithm>(algorithm)), ")");
    case CollectiveKind::kReduceScatter:
      return str_cat(to_string(kind), "(", dtype, ", ", count, ", ", op, ")");
    case CollectiveKind::kReduce:
      return str_cat("reduce(", dtype, ", ", count, ", ", op, ", root ", root, ")");
    case CollectiveKind::kGather:
    case CollectiveKind::kScatter:
      return str_cat(to_string(kind), "(", dtype, ", ", count, ", root ", root, ")");
    case CollectiveKind::kAllToAll: return str_cat("all_to_all(", dtype, ")");
    case CollectiveKind::kPointToPoint:
      return str_cat("send/recv(", dtype, ", ", count, ", tag ", root, ")");
  }
  return str_cat("collective kind ", static_cast<int>(kind));
}

std::string CallInfo::describe_with_seq() const { return str_cat(describe(), " as op #", seq); }

WireHeader WireHeader::data(uint32_t group, const CallInfo& call, uint32_t payload_bytes) {
  WireHeader h;
  h.group = group;
  h.seq = call.seq;
  h.count = call.count;
  h.root = call.root;
  h.kind = static_cast<uint8_t>(call.kind);
  h.dtype = static_cast<uint8_t>(call.dtype);
  h.op = static_cast<uint8_t>(call.op);
  h.frame = static_cast<uint8_t>(FrameType::kData);
  h.payload_bytes = payload_bytes;
  h.algorithm = call.algorithm;
  return h;
}

WireHeader WireHeader::control(uint32_t group, FrameType frame, uint32_t payload_bytes,
                               ErrorKind error_kind) {
  WireHeader h;
  h.group = group;
  h.frame = static_cast<uint8_t>(frame);
  h.payload_bytes = payload_bytes;
  h.error_kind = static_cast<uint8_t>(error_kind);
  return h;
}

WireHeader WireHeader::make_probe(uint32_t group, const CallInfo& call, ProbeReason why) {
  WireHeader h = data(group, call, 0);
  h.frame = static_cast<uint8_t>(FrameType::kProbe);
  h.probe = static_cast<uint8_t>(why);
  return h;
}

WireHeader WireHeader::p2p(uint32_t group, uint64_t seq, int tag, DataType dtype, uint64_t count,
                           uint32_t payload_bytes) {
  WireHeader h;
  h.group = group;
  h.seq = seq;
  h.count = count;
  h.root = tag;
  h.kind = static_cast<uint8_t>(CollectiveKind::kPointToPoint);
  h.dtype = static_cast<uint8_t>(dtype);
  h.frame = static_cast<uint8_t>(FrameType::kP2P);
  h.payload_bytes = payload_bytes;
  return h;
}

bool WireHeader::is_p2p(uint32_t group_id) const {
  return magic == kWireMagic && group == group_id &&
         frame == static_cast<uint8_t>(FrameType::kP2P) &&
         kind == static_cast<uint8_t>(CollectiveKind::kPointToPoint);
}

bool WireHeader::is_probe(uint32_t group_id) const {
  return magic == kWireMagic && group == group_id &&
         frame == static_cast<uint8_t>(FrameType::kProbe) && payload_bytes == 0 &&
         error_kind == 0 && reserved == 0 &&
         (probe == static_cast<uint8_t>(ProbeReason::kTimedOut) ||
          probe == static_cast<uint8_t>(ProbeReason::kAnswer));
}

CallInfo WireHeader::call() const {
  CallInfo c;
  c.kind = static_cast<CollectiveKind>(kind);
  c.dtype = static_cast<DataType>(dtype);
  c.op = static_cast<ReduceOp>(op);
  c.root = root;
  c.count = count;
  c.seq = seq;
  c.algorithm = algorithm;
  return c;
}

bool WireHeader::matches(uint32_t group_id, const CallInfo& c) const {
  return magic == kWireMagic && group == group_id &&
         frame == static_cast<uint8_t>(FrameType::kData) && call() == c;
}

uint32_t group_hash(std::string_view prefix) {
  uint32_t h = 2166136261u;
  for (unsigned char ch : prefix) {
    h ^= ch;
    h *= 16777619u;
  }
  return h;
}

}  // namespace collie
