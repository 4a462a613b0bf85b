#include "collie/collectives/cpu_communicator.h"

#include <sched.h>

#include <cstdlib>
#include <cstring>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/parse_duration.h"
#include "collie/base/small_vector.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/reduce_kernels.h"
#include "collie/collectives/transport/join.h"

namespace collie {
namespace {

// What check_tensor requires, without a message.
bool usable(const TensorView& t) {
  return t.device.is_cpu() && is_valid(t.dtype) && (t.count == 0 || t.data != nullptr);
}

void check_tensor_arg(const char* what, const char* name, const TensorView& t) {
  if (usable(t)) return;
  COLLIE_ARG_CHECK(t.device.is_cpu(), what, ": ", name, " is on ", t.device,
                   "; the CPU communicator takes CPU buffers only");
  COLLIE_ARG_CHECK(is_valid(t.dtype), what, ": ", name, " has an invalid dtype (",
                   static_cast<int>(t.dtype), ")");
  COLLIE_ARG_CHECK(t.count == 0 || t.data != nullptr, what, ": ", name, " has ", t.count,
                   " elements but a null data pointer");
}

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

}  // namespace

std::unique_ptr<Communicator> Communicator::connect(Store& store, int rank, int size,
                                                    const CommunicatorOptions& options) {
  COLLIE_ARG_CHECK_GE(size, 1, "communicator size");
  COLLIE_ARG_CHECK(rank >= 0 && rank < size, "rank ", rank, " is not in [0, ", size, ")");
  COLLIE_ARG_CHECK_GT(options.segment_bytes, size_t{0}, "CommunicatorOptions::segment_bytes");
  COLLIE_ARG_CHECK_LE(options.segment_bytes, size_t{1} << 30, "CommunicatorOptions::segment_bytes");
  const TransportChoice choice = resolve_transport(options.transport);
  if (size == 1) return std::make_unique<CpuCommunicator>(rank, size, "", nullptr, options);
  Bootstrap boot = join_group(store, rank, size, options);
  // Oversubscribed (4 ranks on 2 cores) a spinning rank may hold the core of
  // the peer it waits for, so it spins for a shorter time; the transport's
  // back-off stops spins that keep failing either way.
  const int cores = available_cores();
  // This rank's index among its host's ranks (all of them on one host),
  // for its home CPU (TransportOptions::home_cpu).
  int local_index = -1;
  if (boot.local_ranks <= cores && boot.local_ranks == size) local_index = rank;
  if (boot.local_ranks <= cores && !boot.host_of.empty()) {
    local_index = 0;
    for (int r = 0; r < rank; ++r) local_index += boot.host_of[r] == boot.host_of[rank];
  }
  TransportOptions topts;
  topts.group_name = options.store_prefix;
  topts.spin = boot.local_ranks > cores ? options.oversubscribed_spin : options.spin;
  topts.busy_poll = boot.local_ranks > cores ? std::chrono::microseconds(0) : options.busy_poll;
  topts.home_cpu = home_cpu(local_index, boot.local_ranks);
  topts.report_after = std::chrono::duration_cast<std::chrono::milliseconds>(options.report_after);
  topts.futex_wait = options.futex_wait;
  topts.p2p_single_copy_bytes = options.p2p_single_copy_bytes;
  COLLIE_LOG(kDebug) << boot.local_ranks << " ranks of " << size << " on this host with " << cores
                     << " cores: spinning " << topts.spin.count() << "us before sleeping";
  auto transport = std::make_unique<Transport>(rank, size, group_hash(options.store_prefix),
                                               std::vector<std::unique_ptr<Connection>>(size),
                                               std::move(boot.linker), topts);
  auto comm =
      std::make_unique<CpuCommunicator>(rank, size, boot.address, std::move(transport), options);
  const Deadline deadline(options.timeout);
  // Every rank on one host: the shared-memory algorithms need every peer's
  // channel (N-1 of them, all local), so connect them now and see whether
  // every pair can read the others' memory.
  const bool one_host = boot.local_ranks == size && choice != TransportChoice::kTcp;
  // Otherwise the ring neighbours, which nearly every algorithm talks to,
  // are connected now (so that a dead neighbour is found at init, and a
  // failure reaches them as an abort frame); the rest on first use.
  if (options.connect_all || one_host) {
    comm->channel_kinds(deadline, true);
  } else {
    comm->connect_peers({(rank + size - 1) % size, (rank + 1) % size}, deadline);
  }
  if (one_host) comm->choose_shm_algorithms();
  if (!boot.host_of.empty()) comm->choose_hierarchical(std::move(boot.host_of), deadline);
  // Start-up placement. Ranks started by one launcher, and woken by one
  // store thread during the rendezvous, often start on the same CPU; two
  // ranks that then spin on each other look to the load balancer like one
  // busy core, and it takes it tens of milliseconds to move one (a 2-rank
  // job's first 4-byte all_reduces took ~17 us each instead of 0.3-0.5 us,
  // both ranks on one CPU in every slow run). So a rank with a core of its
  // own moves once, now, after the set-up's sleeps and wake-ups, to its home
  // CPU; the transport moves it again if a later wake-up pulls the pair
  // back together (SpinPolicy::note_wait).
  if (topts.home_cpu >= 0) move_to_cpu(topts.home_cpu);
  return comm;
}

CpuCommunicator::CpuCommunicator(int rank, int size, std::string address,
                                 std::unique_ptr<Transport> transport,
                                 const CommunicatorOptions& options)
    : rank_(rank),
      size_(size),
      address_(std::move(address)),
      transport_(std::move(transport)),
      config_{options.segment_bytes, options.small_message_bytes, options.shm_all_reduce_ranks,
              options.shm_ring_bytes, options.hierarchical_small_bytes},
      hierarchical_wanted_(options.hierarchical),
      check_args_(options.check_arguments) {}

void CpuCommunicator::begin_internal(CallInfo call, const Deadline& deadline, bool linking) {
  // Op #0: the communicator's own calls at init are not numbered among the
  // user's (whose first call is op #1). Every rank finishes them before
  // its first user call, so frames of op #1 arriving early are in order.
  call.seq = 0;
  transport_->begin(call, deadline, linking);
}

CallInfo CpuCommunicator::begin(CallInfo call, const Deadline& deadline) {
  call.seq = ++seq_;
  if (transport_) transport_->begin(call, deadline);
  return call;
}

void CpuCommunicator::check_tensor(const char* what, const char* name, const TensorView& t) const {
  if (check_args_) check_tensor_arg(what, name, t);
}

void CpuCommunicator::check_reduce_op(const char* what, DataType dtype, ReduceOp op) const {
  if (!check_args_) return;
  COLLIE_ARG_CHECK(reduction_supported(op, dtype), what, ": ", unsupported_reduction(op, dtype));
}

void CpuCommunicator::check_root(const char* what, int root) const {
  if (!check_args_) return;
  COLLIE_ARG_CHECK(root >= 0 && root < size_, what, ": root ", root, " is not a rank of this ",
                   size_, "-rank group");
}

void CpuCommunicator::check_list(const char* what, const char* name,
                                 std::span<const TensorView> list, DataType dtype,
                                 size_t count) const {
  if (!check_args_) return;
  COLLIE_ARG_CHECK(list.size() == static_cast<size_t>(size_), what, ": ", name, " holds ",
                   list.size(), " buffer(s) but the group has ", size_, " ranks");
  for (size_t p = 0; p < list.size(); ++p) {
    const TensorView& t = list[p];
    // The name "out[3]" only when something is wrong: formatting it for
    // every element cost more than a small all_to_all's data exchange.
    if (usable(t) && t.dtype == dtype && (count == SIZE_MAX || t.count == count)) continue;
    const std::string which = str_cat(name, "[", p, "]");
    check_tensor(what, which.c_str(), list[p]);
    COLLIE_ARG_CHECK(list[p].dtype == dtype, what, ": ", which, " is ", list[p].dtype,
                     " but the call's dtype is ", dtype);
    COLLIE_ARG_CHECK(count == SIZE_MAX || list[p].count == count, what, ": ", which, " has ",
                     list[p].count, " elements, expected ", count);
  }
}

void CpuCommunicator::all_reduce(TensorView in, TensorView out, ReduceOp op,
                                 const Deadline& deadline, AllReduceAlgorithm algorithm) {
  constexpr const char* kWhat = "all_reduce";
  if (transport_) transport_->check_usable(kWhat);
  check_tensor(kWhat, "in", in);
  check_tensor(kWhat, "out", out);
  COLLIE_ARG_CHECK(!check_args_ || (in.dtype == out.dtype && in.count == out.count), kWhat,
                   ": in is (", in.dtype, ", ", in.count, ") but out is (", out.dtype, ", ",
                   out.count, ")");
  COLLIE_ARG_CHECK(in.data == out.data || !overlaps(in.data, in.nbytes(), out.data, out.nbytes()),
                   kWhat, ": in and out overlap without being the same buffer");
  check_reduce_op(kWhat, out.dtype, op);
  COLLIE_ARG_CHECK(algorithm != AllReduceAlgorithm::kShm || shm_algorithms_ || size_ == 1, kWhat,
                   ": the shm algorithm needs every rank on one host, each able to read the "
                   "others' memory (process_vm_readv)");
  const bool hierarchical = hosts_ && hosts_->uniform;
  COLLIE_ARG_CHECK(algorithm != AllReduceAlgorithm::kHierarchical || hierarchical, kWhat,
                   ": the hierarchical algorithm needs a group spanning hosts that all run the "
                   "same number of ranks, each able to read its host peers' memory, and "
                   "COLLIE_HIERARCHICAL not 0 (this group: ",
                   hosts_ ? str_cat(hosts_->hosts.size(), " hosts of different sizes")
                          : std::string("hierarchical algorithms off"),
                   ")");
  if (algorithm == AllReduceAlgorithm::kAuto && hierarchical) {
    algorithm = AllReduceAlgorithm::kHierarchical;
  } else if (algorithm == AllReduceAlgorithm::kAuto) {
    // The direct exchange talks to every peer: beyond kDirectPeers TCP peers
    // it would connect the whole world, so the ring (two peers) takes over.
    const bool direct = size_ <= kDirectPeers || shm_algorithms_;
    // On one host, few ranks or large buffers run the ring over the
    // shared-memory channels: it beats reading the peers' memory there
    // (CommunicatorOptions::shm_all_reduce_ranks, shm_ring_bytes).
    const bool shm = shm_algorithms_ && size_ >= config_.shm_all_reduce_ranks &&
                     out.nbytes() < config_.shm_ring_bytes;
    algorithm = out.nbytes() <= config_.small_message_bytes && direct ? AllReduceAlgorithm::kSmall
                : shm                                                 ? AllReduceAlgorithm::kShm
                                                                      : AllReduceAlgorithm::kRing;
  }
  last_all_reduce_ = algorithm;
  CallInfo call{CollectiveKind::kAllReduce, out.dtype, op, 0, out.count};
  call.algorithm = static_cast<uint8_t>(algorithm);
  begin(call, deadline);
  if (size_ == 1) {
    if (in.data != out.data && out.count > 0) std::memcpy(out.data, in.data, out.nbytes());
    return;  // AVG over one rank is the value itself
  }
  if (algorithm == AllReduceAlgorithm::kSmall) {
    small_all_reduce(*transport_, workspace_, in, out, op);
  } else if (algorithm == AllReduceAlgorithm::kShm) {
    shm_all_reduce(*transport_, workspace_, in, out, op);
  } else if (algorithm == AllReduceAlgorithm::kHierarchical) {
    ++hierarchical_calls_;
    hierarchical_all_reduce(*transport_, workspace_, config_, *hosts_, in, out, op);
  } else {
    ring_all_reduce(*transport_, workspace_, config_, in, out, op);
  }
}

void CpuCommunicator::broadcast(TensorView tensor, int root, const Deadline& deadline) {
  if (transport_) transport_->check_usable("broadcast");
  check_tensor("broadcast", "tensor", tensor);
  COLLIE_ARG_CHECK(!check_args_ || (root >= 0 && root < size_), "broadcast: root ", root,
                   " is not a rank of this ", size_, "-rank group");
  CallInfo call{CollectiveKind::kBroadcast, tensor.dtype, ReduceOp::kSum, root, tensor.count};
  call.algorithm = hosts_ ? 2 : use_shm(tensor.nbytes()) ? 1 : 0;
  begin(call, deadline);
  if (size_ == 1) return;
  if (hosts_) {
    ++hierarchical_calls_;
    hierarchical_broadcast(*transport_, config_, *hosts_, tensor, root);
  } else if (call.algorithm) {
    shm_broadcast(*transport_, tensor, root);
  } else {
    collie::broadcast(*transport_, config_, tensor, root);
  }
}

void CpuCommunicator::barrier(const Deadline& deadline) {
  CallInfo call{CollectiveKind::kBarrier};
  call.algorithm = hosts_ ? 1 : 0;
  begin(call, deadline);
  if (hosts_) {
    ++hierarchical_calls_;
    hierarchical_barrier(*transport_, *hosts_);
  } else if (size_ > 1) {
    dissemination_barrier(*transport_);
  }
}

void CpuCommunicator::all_gather(TensorView in, TensorView out, const Deadline& deadline) {
  constexpr const char* kWhat = "all_gather";
  if (transport_) transport_->check_usable(kWhat);
  check_tensor(kWhat, "in", in);
  check_tensor(kWhat, "out", out);
  COLLIE_ARG_CHECK(!check_args_ || (in.dtype == out.dtype && out.count == in.count * size_), kWhat,
                   ": out must be (", in.dtype, ", ", in.count * size_, ") = size x in, got (",
                   out.dtype, ", ", out.count, ")");
  auto* slot = static_cast<uint8_t*>(out.data) + rank_ * in.nbytes();
  COLLIE_ARG_CHECK(in.data == slot || !overlaps(in.data, in.nbytes(), out.data, out.nbytes()),
                   kWhat, ": in overlaps out without being exactly rank ", rank_, "'s slot of it");
  CallInfo call{CollectiveKind::kAllGather, in.dtype, ReduceOp::kSum, 0, in.count};
  const bool hierarchical = hosts_ && hosts_->uniform;
  call.algorithm = hierarchical ? 2 : use_shm(out.nbytes()) ? 1 : 0;
  begin(call, deadline);
  if (size_ == 1) {
    if (in.data != out.data && in.count > 0) std::memcpy(out.data, in.data, in.nbytes());
    return;
  }
  if (hierarchical) {
    ++hierarchical_calls_;
    hierarchical_all_gather(*transport_, workspace_, config_, *hosts_, in, out);
    return;
  }
  if (call.algorithm) {
    shm_all_gather(*transport_, in, out);
    return;
  }
  SmallVector<uint8_t*> slots(size_);
  for (int p = 0; p < size_; ++p) slots[p] = static_cast<uint8_t*>(out.data) + p * in.nbytes();
  collie::all_gather(*transport_, config_, in, slots);
}

void CpuCommunicator::all_gather(TensorView in, std::span<const TensorView> out,
                                 const Deadline& deadline) {
  constexpr const char* kWhat = "all_gather";
  if (transport_) transport_->check_usable(kWhat);
  check_tensor(kWhat, "in", in);
  check_list(kWhat, "out", out, in.dtype, in.count);
  begin(CallInfo{CollectiveKind::kAllGather, in.dtype, ReduceOp::kSum, 0, in.count}, deadline);
  SmallVector<uint8_t*> slots(size_);
  for (int p = 0; p < size_; ++p) slots[p] = static_cast<uint8_t*>(out[p].data);
  if (size_ == 1) {
    if (in.data != slots[0] && in.count > 0) std::memcpy(slots[0], in.data, in.nbytes());
    return;
  }
  collie::all_gather(*transport_, config_, in, slots);
}

void CpuCommunicator::reduce_scatter(TensorView in, TensorView out, ReduceOp op,
                                     const Deadline& deadline) {
  constexpr const char* kWhat = "reduce_scatter";
  if (transport_) transport_->check_usable(kWhat);
  check_tensor(kWhat, "in", in);
  check_tensor(kWhat, "out", out);
  COLLIE_ARG_CHECK(!check_args_ || (in.dtype == out.dtype && in.count == out.count * size_), kWhat,
                   ": in must be (", out.dtype, ", ", out.count * size_, ") = size x out, got (",
                   in.dtype, ", ", in.count, ")");
  auto* slot = static_cast<uint8_t*>(in.data) + rank_ * out.nbytes();
  COLLIE_ARG_CHECK(out.data == slot || !overlaps(in.data, in.nbytes(), out.data, out.nbytes()),
                   kWhat, ": out overlaps in without being exactly rank ", rank_, "'s slot of it");
  check_reduce_op(kWhat, out.dtype, op);
  CallInfo call{CollectiveKind::kReduceScatter, out.dtype, op, 0, out.count};
  const bool hierarchical = hosts_ && hosts_->uniform;
  call.algorithm = hierarchical ? 2 : use_shm(in.nbytes()) ? 1 : 0;
  begin(call, deadline);
  if (size_ == 1) {
    if (in.data != out.data && out.count > 0) std::memcpy(out.data, in.data, out.nbytes());
    return;
  }
  if (hierarchical) {
    ++hierarchical_calls_;
    hierarchical_reduce_scatter(*transport_, workspace_, config_, *hosts_, in, out, op);
    return;
  }
  if (call.algorithm) {
    shm_reduce_scatter(*transport_, workspace_, in, out, op);
    return;
  }
  SmallVector<const uint8_t*> slots(size_);
  for (int p = 0; p < size_; ++p)
    slots[p] = static_cast<const uint8_t*>(in.data) + p * out.nbytes();
  collie::reduce_scatter(*transport_, workspace_, config_, slots, out, op);
}

void CpuCommunicator::reduce_scatter(std::span<const TensorView> in, TensorView out, ReduceOp op,
                                     const Deadline& deadline) {
  constexpr const char* kWhat = "reduce_scatter";
  if (transport_) transport_->check_usable(kWhat);
  check_tensor(kWhat, "out", out);
  check_list(kWhat, "in", in, out.dtype, out.count);
  check_reduce_op(kWhat, out.dtype, op);
  begin(CallInfo{CollectiveKind::kReduceScatter, out.dtype, op, 0, out.count}, deadline);
  if (size_ == 1) {
    if (in[0].data != out.data && out.count > 0) std::memcpy(out.data, in[0].data, out.nbytes());
    return;
  }
  SmallVector<const uint8_t*> slots(size_);
  for (int p = 0; p < size_; ++p) slots[p] = static_cast<const uint8_t*>(in[p].data);
  collie::reduce_scatter(*transport_, workspace_, config_, slots, out, op);
}

void CpuCommunicator::reduce(TensorView in, TensorView out, ReduceOp op, int root,
                             const Deadline& deadline) {
  constexpr const char* kWhat = "reduce";
  if (transport_) transport_->check_usable(kWhat);
  check_tensor(kWhat, "in", in);
  check_root(kWhat, root);
  check_reduce_op(kWhat, in.dtype, op);
  if (rank_ == root) {
    check_tensor(kWhat, "out", out);
    COLLIE_ARG_CHECK(!check_args_ || (in.dtype == out.dtype && in.count == out.count), kWhat,
                     ": in is (", in.dtype, ", ", in.count, ") but out is (", out.dtype, ", ",
                     out.count, ")");
    COLLIE_ARG_CHECK(in.data == out.data || !overlaps(in.data, in.nbytes(), out.data, out.nbytes()),
                     kWhat, ": in and out overlap without being the same buffer");
  }
  CallInfo call{CollectiveKind::kReduce, in.dtype, op, root, in.count};
  const bool hierarchical = hosts_ && hosts_->uniform;
  call.algorithm = hierarchical ? 2 : 0;
  begin(call, deadline);
  if (size_ == 1) {
    if (in.data != out.data && in.count > 0) std::memcpy(out.data, in.data, in.nbytes());
    return;
  }
  if (hierarchical) {
    ++hierarchical_calls_;
    hierarchical_reduce(*transport_, workspace_, config_, *hosts_, in, out, op, root);
    return;
  }
  collie::reduce(*transport_, workspace_, config_, in, out, op, root);
}

void CpuCommunicator::gather(TensorView in, std::span<const TensorView> out, int root,
                             const Deadline& deadline) {
  constexpr const char* kWhat = "gather";
  if (transport_) transport_->check_usable(kWhat);
  check_tensor(kWhat, "in", in);
  check_root(kWhat, root);
  if (rank_ == root) {
    check_list(kWhat, "out", out, in.dtype, in.count);
  } else {
    COLLIE_ARG_CHECK(!check_args_ || out.empty(), kWhat, ": rank ", rank_, " is not the root (",
                     root, ") but passed ", out.size(), " output buffer(s)");
  }
  begin(CallInfo{CollectiveKind::kGather, in.dtype, ReduceOp::kSum, root, in.count}, deadline);
  SmallVector<uint8_t*> slots;
  for (const auto& o : out) slots.push_back(static_cast<uint8_t*>(o.data));
  if (size_ == 1) {
    if (in.data != slots[0] && in.count > 0) std::memcpy(slots[0], in.data, in.nbytes());
    return;
  }
  collie::gather(*transport_, workspace_, config_, in, slots, root);
}

void CpuCommunicator::scatter(std::span<const TensorView> in, TensorView out, int root,
                              const Deadline& deadline) {
  constexpr const char* kWhat = "scatter";
  if (transport_) transport_->check_usable(kWhat);
  check_tensor(kWhat, "out", out);
  check_root(kWhat, root);
  if (rank_ == root) {
    check_list(kWhat, "in", in, out.dtype, out.count);
  } else {
    COLLIE_ARG_CHECK(!check_args_ || in.empty(), kWhat, ": rank ", rank_, " is not the root (",
                     root, ") but passed ", in.size(), " input buffer(s)");
  }
  CallInfo call{CollectiveKind::kScatter, out.dtype, ReduceOp::kSum, root, out.count};
  call.algorithm = use_shm(out.nbytes() * static_cast<size_t>(size_)) ? 1 : 0;
  begin(call, deadline);
  SmallVector<const uint8_t*> slots;
  for (const auto& i : in) slots.push_back(static_cast<const uint8_t*>(i.data));
  if (size_ == 1) {
    if (slots[0] != out.data && out.count > 0) std::memcpy(out.data, slots[0], out.nbytes());
    return;
  }
  if (call.algorithm) {
    shm_scatter(*transport_, slots, out, root);
    return;
  }
  collie::scatter(*transport_, workspace_, config_, slots, out, root);
}

void CpuCommunicator::all_to_all(std::span<const TensorView> in, std::span<const TensorView> out,
                                 const Deadline& deadline) {
  constexpr const char* kWhat = "all_to_all";
  if (transport_) transport_->check_usable(kWhat);
  COLLIE_ARG_CHECK(!check_args_ || !in.empty(), kWhat, ": in holds no buffer; the group has ",
                   size_, " ranks");
  const DataType dtype = in[0].dtype;
  check_list(kWhat, "in", in, dtype, SIZE_MAX);
  check_list(kWhat, "out", out, dtype, SIZE_MAX);
  COLLIE_ARG_CHECK(in[rank_].count == out[rank_].count, kWhat, ": in[", rank_, "] has ",
                   in[rank_].count, " elements but out[", rank_, "] has ", out[rank_].count,
                   " (this rank's own part is copied across)");
  begin(CallInfo{CollectiveKind::kAllToAll, dtype, ReduceOp::kSum, 0, 0}, deadline);
  SmallVector<Span> sends;
  SmallVector<MutableSpan> recvs;
  for (int p = 0; p < size_; ++p) {
    sends.push_back(Span{in[p].data, in[p].nbytes()});
    recvs.push_back(MutableSpan{out[p].data, out[p].nbytes()});
  }
  if (size_ == 1) {
    if (sends[0].data != recvs[0].data && recvs[0].bytes > 0)
      std::memcpy(recvs[0].data, sends[0].data, recvs[0].bytes);
    return;
  }
  if (shm_algorithms_) {
    shm_all_to_all(*transport_, config_.small_message_bytes, sends, recvs);
  } else {
    collie::all_to_all(*transport_, config_, sends, recvs);
  }
}

namespace {

// A batch on the transport (the batch of a one-rank group is done at once).
struct TransportBatch final : P2PBatch {
  std::shared_ptr<Transport::P2PRequest> request;
};

}  // namespace

std::shared_ptr<P2PBatch> CpuCommunicator::post_p2p(std::span<const P2POp> ops,
                                                    const Deadline& deadline) {
  check_p2p(ops);
  auto batch = std::make_shared<TransportBatch>();
  if (ops.empty()) {
    batch->done = true;
    return batch;
  }
  batch->request = transport_->start_p2p(ops, deadline);
  p2p_done(*batch);
  return batch;
}

bool CpuCommunicator::p2p_done(P2PBatch& batch) {
  if (batch.done) return true;
  auto& b = static_cast<TransportBatch&>(batch);
  if (!transport_->p2p_done(*b.request)) return false;
  Transport::p2p_sources(*b.request, &b.sources);
  b.done = true;
  b.request.reset();
  return true;
}

void CpuCommunicator::wait_p2p(P2PBatch& batch, const Deadline& deadline) {
  if (batch.done) return;
  transport_->wait_p2p(*static_cast<TransportBatch&>(batch).request, deadline);
  p2p_done(batch);
}

void CpuCommunicator::poll_p2p(const Deadline& deadline) {
  if (transport_) transport_->poll_p2p(deadline);
}

void CpuCommunicator::cancel_p2p() {
  if (transport_) transport_->cancel_p2p();
}

void CpuCommunicator::check_p2p(std::span<const P2POp> ops) const {
  constexpr const char* kWhat = "send/recv";
  if (transport_) transport_->check_usable(kWhat);
  for (const P2POp& op : ops) {
    const bool recv = op.type == P2POpType::kIrecv;
    check_tensor(kWhat, recv ? "recv tensor" : "send tensor", op.tensor);
    COLLIE_ARG_CHECK(
        !check_args_ || (recv && op.peer == kAnySource) || (op.peer >= 0 && op.peer < size_), kWhat,
        ": peer ", op.peer, " is not a rank of this ", size_, "-rank group",
        recv ? " (nor kAnySource)" : "");
    COLLIE_ARG_CHECK(!check_args_ || op.peer != rank_, kWhat, ": rank ", rank_,
                     recv ? " cannot receive from itself" : " cannot send to itself");
  }
}

std::vector<int> CpuCommunicator::send_recv(std::span<const P2POp> ops, const Deadline& deadline) {
  check_p2p(ops);
  if (ops.empty()) return {};
  std::vector<int> sources;
  transport_->run_p2p(ops, deadline);
  Transport::p2p_sources(transport_->blocking_p2p(), &sources);
  return sources;
}

int CpuCommunicator::send_recv_one(const P2POp& op, const Deadline& deadline) {
  const std::span<const P2POp> ops(&op, 1);
  check_p2p(ops);
  transport_->run_p2p(ops, deadline);
  const auto& recvs = transport_->blocking_p2p().recvs;
  return recvs.empty() ? -1 : recvs.front().source;
}

}  // namespace collie

namespace collie {

void CpuCommunicator::connect_peers(const std::vector<int>& peers, const Deadline& deadline) {
  begin_internal(CallInfo{CollectiveKind::kBarrier}, deadline, true);
  for (int p : peers) {
    if (p != rank_) transport_->channel_kind(p);
  }
}

std::vector<std::string> CpuCommunicator::channel_kinds(const Deadline& deadline, bool connect) {
  std::vector<std::string> kinds(size_);
  if (!transport_) return kinds;
  if (connect) begin_internal(CallInfo{CollectiveKind::kBarrier}, deadline, true);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if (connect) {
      kinds[p] = std::string(to_string(transport_->channel_kind(p)));
    } else if (auto kind = transport_->connected_kind(p)) {
      kinds[p] = std::string(to_string(*kind));
    }
  }
  return kinds;
}

void CpuCommunicator::choose_shm_algorithms() {
  // Every pair decides the same at connect (a pair reads each other's
  // memory, or neither does), and a host allows cross-memory attach to all
  // of its processes of one user or to none, so the ranks agree without a
  // call of their own; should they not, the algorithm in every header
  // turns the disagreement into a mismatch error, never mixed data.
  shm_algorithms_ = transport_->all_peers_readable();
  COLLIE_LOG(kDebug) << "rank " << rank_ << ": shared-memory algorithms "
                     << (shm_algorithms_ ? "on" : "off (a pair cannot read its peer's memory)");
}

void CpuCommunicator::choose_hierarchical(std::vector<int> host_of, const Deadline& deadline) {
  HostMap map(std::move(host_of));
  // One rank per host everywhere: nothing to share, the flat algorithms are
  // the hierarchy (every rank knows the map, so all skip this together).
  if (map.max_local < 2) return;
  const auto& mine = map.hosts[map.host_of[rank_]];
  connect_peers(mine, deadline);
  const bool wanted = hierarchical_wanted_;
  bool readable = true;
  for (int p : mine) readable = readable && (p == rank_ || transport_->peer_pid(p) > 0);
  // Whether a host allows cross-memory attach is the host's business, and
  // CommunicatorOptions::hierarchical each rank's: agree on both (the ring, whose
  // neighbours are connected already).
  int32_t ok = wanted && readable ? 1 : 0;
  CallInfo call{CollectiveKind::kAllReduce, DataType::kInt32, ReduceOp::kMin, 0, 1};
  call.algorithm = static_cast<uint8_t>(AllReduceAlgorithm::kRing);
  begin_internal(call, deadline);
  const TensorView flag{&ok, 1, DataType::kInt32, Device::cpu()};
  ring_all_reduce(*transport_, workspace_, config_, flag, flag, ReduceOp::kMin);
  COLLIE_LOG(kDebug) << "rank " << rank_ << ": " << map.hosts.size() << " hosts, at most "
                     << map.max_local << " ranks on one: hierarchical algorithms "
                     << (ok ? "on"
                            : "off (COLLIE_HIERARCHICAL=0 or a host without "
                              "cross-memory attach)");
  if (ok == 1) hosts_ = std::move(map);
}

}  // namespace collie
