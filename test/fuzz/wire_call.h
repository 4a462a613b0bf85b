// The call the wire_header target's stream is checked against, shared with
// make_seeds so that the seeds' data frames match it.
#pragma once

#include <cstdint>

#include "collie/collectives/transport/wire.h"

namespace collie::fuzz {

inline CallInfo fuzz_call(uint64_t count, uint64_t seq) {
  CallInfo c;
  c.kind = CollectiveKind::kAllReduce;
  c.dtype = DataType::kFloat32;
  c.op = ReduceOp::kSum;
  c.count = count;
  c.seq = seq;
  c.algorithm = 1;
  return c;
}

}  // namespace collie::fuzz
