// The ProcessGroup contract, checked from inside one rank: every op of
// runtime/process_group/process_group.h x every dtype x every reduce op,
// in place and out of place, non-zero roots, zero-length buffers, on
// whatever group it is given (the default group or one from new_group).
// Every result is compared bit for bit with a reference this rank computes
// itself (test/support/reference.h: small integers, so any reduction order
// gives the same bits). An op the backend cannot run must be refused with
// InvalidArgument naming it before anything is sent, the buffer untouched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collie/base/types.h"
#include "collie/runtime/process_group/process_group.h"

namespace collie::test {

// The backend under test, and what it promises beyond the common contract.
struct ContractBackend {
  std::string name;          // "cpu" or "nccl": what the cases are about
  std::string init_backend;  // what init_process_group gets
  std::string transport;     // the cpu backend's channels: "tcp", "shm" or "" (auto)
  bool on_gpu = false;       // buffers in CUDA device memory
  // recv from kAnySource, and receives of one peer matched by tag out of
  // order (NCCL matches a peer's messages in order, whatever the tag).
  bool any_source = true;
  bool tag_matching = true;
  // Point-to-point ops that do not wait behind one another or behind
  // collectives: a receive posted early, or outstanding across a
  // collective, holds nothing up (torch's gloo; NCCL runs a peer's ops on
  // one stream, in order).
  bool early_receives = true;
  // AVG is sum / size exactly; NCCL multiplies each input by 1/size first
  // (its PreMulSum), which may differ by an ulp per rank: checked within
  // size ulps there.
  bool exact_avg = true;

  // Why the backend refuses to reduce dtype with op ("" when it does not):
  // NCCL has no bitwise reductions except band/bor on bool.
  std::string refuses(ReduceOp op, DataType dtype) const;
};

// From $COLLIE_CONTRACT_BACKEND: "cpu" (the default), "cpu:tcp",
// "cpu:shm" (the channel forced) or "nccl".
ContractBackend contract_backend();

struct MatrixOptions {
  std::vector<DataType> dtypes;  // empty: every dtype
  std::vector<ReduceOp> ops;     // empty: every op
  bool large = true;             // one count past the shared-memory copy threshold
  std::string label;             // names the group in failures
};

// Runs the whole matrix on `pg` and returns how many calls it checked.
// Throws std::runtime_error naming the op, dtype, reduce op, count, root and
// rank of the first wrong result.
uint64_t run_op_matrix(ProcessGroup& pg, const ContractBackend& backend,
                       const MatrixOptions& options);

}  // namespace collie::test
