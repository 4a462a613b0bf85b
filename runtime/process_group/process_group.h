// ProcessGroup: the collectives a training loop calls, on one group of ranks.
// Backends (cpu, nccl) implement it. Every collective is asynchronous and
// returns a Work; collectives on one group run in the order they were issued
// (the same order on every rank, as in torch).
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/base/types.h"
#include "collie/runtime/process_group/work.h"

namespace collie {

struct AllReduceOptions {
  ReduceOp op = ReduceOp::kSum;
  Timeout timeout = kUnsetTimeout;  // kUnsetTimeout: the group's timeout
  // false: the caller will wait at once (torch's async_op=False), so a
  // backend may run the collective on the caller's thread when the group is
  // idle, saving two thread hand-offs; the Work it returns is complete (for
  // device work: ordered on the caller's stream, see work.h).
  bool async_op = true;
};

struct BroadcastOptions {
  int root = 0;
  Timeout timeout = kUnsetTimeout;
  bool async_op = true;  // see AllReduceOptions::async_op
};

struct BarrierOptions {
  Timeout timeout = kUnsetTimeout;
  bool async_op = true;  // see AllReduceOptions::async_op
};

struct AllGatherOptions {
  Timeout timeout = kUnsetTimeout;
  bool async_op = true;  // see AllReduceOptions::async_op
};

struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::kSum;
  Timeout timeout = kUnsetTimeout;
  bool async_op = true;  // see AllReduceOptions::async_op
};

struct ReduceOptions {
  ReduceOp op = ReduceOp::kSum;
  int root = 0;  // torch's dst
  Timeout timeout = kUnsetTimeout;
  bool async_op = true;  // see AllReduceOptions::async_op
};

struct GatherOptions {
  int root = 0;  // torch's dst
  Timeout timeout = kUnsetTimeout;
  bool async_op = true;  // see AllReduceOptions::async_op
};

struct ScatterOptions {
  int root = 0;  // torch's src
  Timeout timeout = kUnsetTimeout;
  bool async_op = true;  // see AllReduceOptions::async_op
};

struct AllToAllOptions {
  Timeout timeout = kUnsetTimeout;
  bool async_op = true;  // see AllReduceOptions::async_op
};

// send and recv (torch's isend/irecv; send/recv are the same waited on).
struct P2POptions {
  int tag = 0;
  Timeout timeout = kUnsetTimeout;
  bool async_op = true;  // see AllReduceOptions::async_op
};

struct MonitoredBarrierOptions {
  Timeout timeout = kUnsetTimeout;  // the group's timeout when unset
  // false: rank 0 reports the first rank that did not arrive; true: it
  // waits for everyone (up to the timeout) and names every missing rank.
  bool wait_all_ranks = false;
};

// How shrink treats the calls still running on the group it replaces
// (torch's SHRINK_DEFAULT and SHRINK_ABORT).
enum class ShrinkMode {
  kDefault,  // they get until the shrink's deadline to finish, then fail
  kAbort,    // they fail at once
};

struct ShrinkOptions {
  ShrinkMode mode = ShrinkMode::kDefault;
  // Bounds the old group's calls (kDefault) and the survivors' agreement
  // together (a rank nobody reported, that is not found dead and never takes
  // part, is excluded when it passes), and then, afresh, connecting the new
  // group. kUnsetTimeout: the group's timeout.
  Timeout timeout = kUnsetTimeout;
  // torch's shrink_group: the agreement must exclude exactly the ranks
  // asked for (torch numbers the new group from that list), else
  // BackendError naming the ranks it excluded, so that the caller can ask
  // again with them. false: the agreement's answer is taken as it is.
  bool exact = false;
};

class ProcessGroup;

// What shrink returns: the new group and how its ranks map to the old one.
struct ShrinkResult {
  std::shared_ptr<ProcessGroup> group;
  std::vector<int> survivors;  // old ranks, in new rank order
  std::vector<int> excluded;   // old ranks the survivors agreed to leave out
  // This rank's time from entering shrink to the agreement, and to the
  // new group's being connected.
  std::chrono::nanoseconds agreed_after{0}, connected_after{0};
};

// A group its survivors can shrink to a new group without the failed ranks
// (MPI ULFM's revoke, agree and shrink; torch's Backend::shrink). Backends
// that can implement it; runtime/api's shrink_group finds it.
class Shrinkable {
 public:
  virtual ~Shrinkable() = default;
  // Collective among every rank that stays. Revokes this group (every
  // pending and later call on it fails at once, naming why), lets the
  // survivors agree through the group's store on who is excluded (`exclude`,
  // what this rank saw fail, and ranks that never take part:
  // shrink_agreement.h), releases this group's connections and threads and
  // returns a group of the survivors, ranks renumbered densely in the old
  // order. Throws InvalidArgument for a bad `exclude` (out of range, this
  // rank), BackendError when this rank was excluded, the store cannot be
  // reached or (exact) the agreement differs from `exclude`. Once a shrink
  // revoked the group, only shrink may be called on it again (a retry).
  virtual ShrinkResult shrink(std::span<const int> exclude, const ShrinkOptions& options = {}) = 0;
};

// What grow returns: the group with the ranks that joined (null when none
// asked), which are numbered after the members.
struct GrowResult {
  std::shared_ptr<ProcessGroup> group;
  int joined = 0;
};

// A group that processes can join while it runs (a replacement for a rank
// that failed): they ask through the group's store, and the members admit
// them at a point of their choosing (for training, a step boundary).
class Growable {
 public:
  virtual ~Growable() = default;
  // Collective among the members. Rank 0 looks in the store for processes
  // asking to join (two store round trips) and claims their tickets (one
  // each; a joiner that gave up withdrew its own first); every member
  // learns the counts in an all_reduce of three integers, so a member that
  // died fails it everywhere before anything changes. With nobody asking
  // it returns {nullptr, 0} and the group goes on. Otherwise this group is retired (its calls done;
  // later calls fail) and every member and joiner connects the next generation within `timeout`
  // (the group's when unset): members keep their ranks, joiners follow in the order they asked. The
  // joiners hold no state: broadcast it to them from a member.
  virtual GrowResult grow(Timeout timeout = kUnsetTimeout) = 0;
};

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend_name() const = 0;

  // In place: every rank ends with the reduction of all ranks' `tensor`.
  virtual std::shared_ptr<Work> all_reduce(TensorView tensor,
                                           const AllReduceOptions& options = {}) = 0;
  // `tensor` on every rank becomes root's.
  virtual std::shared_ptr<Work> broadcast(TensorView tensor,
                                          const BroadcastOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> barrier(const BarrierOptions& options = {}) = 0;
  // output.count == size() * input.count; rank r's input lands at offset
  // r * input.count. input may alias its slot in output (in place).
  virtual std::shared_ptr<Work> all_gather(TensorView output, TensorView input,
                                           const AllGatherOptions& options = {}) = 0;
  // input.count == size() * output.count; rank r gets the reduction of every
  // rank's slot r.
  virtual std::shared_ptr<Work> reduce_scatter(TensorView output, TensorView input,
                                               const ReduceScatterOptions& options = {}) = 0;

  // The list forms (torch's all_gather and reduce_scatter with tensor
  // lists): size() buffers, each like `input` (all_gather) or `output`
  // (reduce_scatter); rank r's part is outputs[r] / inputs[r].
  virtual std::shared_ptr<Work> all_gather(std::span<const TensorView> outputs, TensorView input,
                                           const AllGatherOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> reduce_scatter(TensorView output,
                                               std::span<const TensorView> inputs,
                                               const ReduceScatterOptions& options = {}) = 0;

  // `tensor` on options.root becomes the reduction of every rank's
  // `tensor`; the other ranks' tensors are left as they were.
  virtual std::shared_ptr<Work> reduce(TensorView tensor, const ReduceOptions& options = {}) = 0;
  // On the root, outputs holds size() buffers like `input` and outputs[r]
  // receives rank r's input; on the other ranks outputs is empty.
  virtual std::shared_ptr<Work> gather(std::span<const TensorView> outputs, TensorView input,
                                       const GatherOptions& options = {}) = 0;
  // On the root, inputs holds size() buffers like `output` and rank r's
  // output receives inputs[r]; on the other ranks inputs is empty.
  virtual std::shared_ptr<Work> scatter(TensorView output, std::span<const TensorView> inputs,
                                        const ScatterOptions& options = {}) = 0;
  // outputs[r] receives rank r's inputs[this rank]: size() buffers each, one
  // dtype; counts may differ (rank p's inputs[r] as long as rank r's
  // outputs[p]).
  virtual std::shared_ptr<Work> all_to_all(std::span<const TensorView> outputs,
                                           std::span<const TensorView> inputs,
                                           const AllToAllOptions& options = {}) = 0;
  // One buffer each way, cut into size() consecutive parts: part r of
  // `input` goes to rank r, part r of `output` comes from rank r. Empty
  // split sizes mean equal parts (count divisible by size()); otherwise
  // size() element counts summing to the buffer's count.
  virtual std::shared_ptr<Work> all_to_all_single(TensorView output, TensorView input,
                                                  std::span<const size_t> output_split_sizes,
                                                  std::span<const size_t> input_split_sizes,
                                                  const AllToAllOptions& options = {}) = 0;

  // Point-to-point (torch's isend/irecv; their blocking forms wait on the
  // Work). Only the two ranks take part, outside the collectives' order on
  // other ranks; on this rank every call still runs in issue order. A
  // message goes to the earliest receive of the same sender and tag (FIFO
  // per (peer, tag)) and must have its size.
  virtual std::shared_ptr<Work> send(TensorView tensor, int dst,
                                     const P2POptions& options = {}) = 0;
  // src may be kAnySource; the Work's source_rank() says who sent.
  virtual std::shared_ptr<Work> recv(TensorView tensor, int src,
                                     const P2POptions& options = {}) = 0;
  // Every op at once (no order among them, so a ring exchange cannot
  // deadlock); one Work for the batch (torch returns it once per op).
  virtual std::shared_ptr<Work> batch_isend_irecv(std::span<const P2POp> ops,
                                                  Timeout timeout = kUnsetTimeout) = 0;

  // torch's monitored_barrier: blocks until every rank arrived; on the
  // timeout rank 0 throws TimeoutError naming the first rank that did not
  // arrive (every one with wait_all_ranks), and the other ranks throw too.
  virtual void monitored_barrier(const MonitoredBarrierOptions& options = {}) = 0;

  // Stops the group: waits up to `timeout` (kUnsetTimeout: the group's
  // timeout) for the collectives already issued, then aborts what is still
  // running. Every later call fails with BackendError. Idempotent;
  // destroy_process_group calls it.
  virtual void shutdown(Timeout timeout = kUnsetTimeout) = 0;

 protected:
  const int rank_;
  const int size_;
};

}  // namespace collie
