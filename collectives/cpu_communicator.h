// CpuCommunicator: the cpu backend's Communicator, over a Transport (TCP
// and shared-memory channels) and, on one host, the shared-memory and CMA
// algorithms.
// It checks arguments, numbers the calls, picks the algorithm and keeps the
// workspace; the algorithms themselves are in one file each.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "collie/collectives/algorithms.h"
#include "collie/collectives/communicator.h"
#include "collie/collectives/transport/transport.h"

namespace collie {

class CpuCommunicator final : public Communicator {
 public:
  // transport is null when size == 1.
  CpuCommunicator(int rank, int size, std::string address, std::unique_ptr<Transport> transport,
                  const CommunicatorOptions& options);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string address() const override { return address_; }
  std::vector<std::string> channel_kinds(const Deadline& deadline, bool connect) override;
  // Every rank on one host: whether the shared-memory algorithms run
  // (every pair reads its peers' memory).
  void choose_shm_algorithms();
  // Connects `peers` now (a call of the communicator's own: every rank
  // calls it with its own peers).
  void connect_peers(const std::vector<int>& peers, const Deadline& deadline);
  // A group spanning hosts (host_of: Bootstrap::host_of): whether the
  // hierarchical algorithms run. They do when some host runs two or more
  // ranks, every rank reads its host peers' memory and COLLIE_HIERARCHICAL
  // is not 0, all agreed by every rank in one all_reduce of the
  // communicator's own (so the choice is the same everywhere).
  void choose_hierarchical(std::vector<int> host_of, const Deadline& deadline);
  // Whether the hierarchical algorithms are on, and how many calls ran one
  // (tests check that the hierarchical path was really taken).
  bool hierarchical() const { return hosts_.has_value(); }
  uint64_t hierarchical_calls() const { return hierarchical_calls_; }
  // Whether the one-host shared-memory algorithms are on, and which
  // algorithm the last all_reduce ran (kAuto resolved; tests check the
  // choice).
  bool shm_algorithms() const { return shm_algorithms_; }
  AllReduceAlgorithm last_all_reduce_algorithm() const { return last_all_reduce_; }
  // Transport::exchange()'s express path: how often it was tried and how
  // often it finished without the posted path (tests check both).
  Transport::ExpressCounts express_counts() const {
    return transport_ ? transport_->express_counts() : Transport::ExpressCounts{};
  }

  void all_reduce(TensorView in, TensorView out, ReduceOp op, const Deadline& deadline,
                  AllReduceAlgorithm algorithm) override;
  void broadcast(TensorView tensor, int root, const Deadline& deadline) override;
  void barrier(const Deadline& deadline) override;
  void all_gather(TensorView in, TensorView out, const Deadline& deadline) override;
  void reduce_scatter(TensorView in, TensorView out, ReduceOp op,
                      const Deadline& deadline) override;
  void all_gather(TensorView in, std::span<const TensorView> out,
                  const Deadline& deadline) override;
  void reduce_scatter(std::span<const TensorView> in, TensorView out, ReduceOp op,
                      const Deadline& deadline) override;
  void reduce(TensorView in, TensorView out, ReduceOp op, int root,
              const Deadline& deadline) override;
  void gather(TensorView in, std::span<const TensorView> out, int root,
              const Deadline& deadline) override;
  void scatter(std::span<const TensorView> in, TensorView out, int root,
               const Deadline& deadline) override;
  void all_to_all(std::span<const TensorView> in, std::span<const TensorView> out,
                  const Deadline& deadline) override;
  std::vector<int> send_recv(std::span<const P2POp> ops, const Deadline& deadline) override;
  int send_recv_one(const P2POp& op, const Deadline& deadline) override;
  std::shared_ptr<P2PBatch> post_p2p(std::span<const P2POp> ops, const Deadline& deadline) override;
  bool p2p_done(P2PBatch& batch) override;
  void wait_p2p(P2PBatch& batch, const Deadline& deadline) override;
  void poll_p2p(const Deadline& deadline) override;
  void cancel_p2p() override;

  bool broken() const override { return transport_ && transport_->broken(); }
  std::vector<int> find_dead(const std::vector<int>& ranks, Clock::time_point until) override {
    return transport_ ? transport_->find_dead_peers(ranks, until) : std::vector<int>{};
  }
  std::vector<int> failed_ranks(Clock::time_point until) override {
    return transport_ ? transport_->failed_peers(until) : std::vector<int>{};
  }
  void abort() override {
    if (transport_) transport_->abort();
  }

 private:
  // send/recv's checks of its ops (peers, tensors), for send_recv and post_p2p.
  void check_p2p(std::span<const P2POp> ops) const;
  // Numbers the call and starts it on the transport (throws at once when
  // broken). Returns the call for size-1 groups too.
  CallInfo begin(CallInfo call, const Deadline& deadline);
  // The communicator's own calls at init (op #0); `linking`: one that only
  // connects peers (Transport::begin).
  void begin_internal(CallInfo call, const Deadline& deadline, bool linking = false);
  // The argument checks (CommunicatorOptions::check_arguments): nothing
  // when the caller checked them at the top of the call.
  void check_tensor(const char* what, const char* name, const TensorView& t) const;
  void check_reduce_op(const char* what, DataType dtype, ReduceOp op) const;
  void check_root(const char* what, int root) const;
  // size() buffers, each of `dtype` and `count` elements (count SIZE_MAX: any).
  void check_list(const char* what, const char* name, std::span<const TensorView> list,
                  DataType dtype, size_t count) const;
  // Whether a call moving `bytes` runs the shared-memory algorithm (the
  // same answer on every rank; recorded in the call's header).
  bool use_shm(size_t bytes) const {
    return shm_algorithms_ && size_ > 1 && bytes > config_.small_message_bytes;
  }

  const int rank_;
  const int size_;
  const std::string address_;
  std::unique_ptr<Transport> transport_;
  const AlgorithmConfig config_;
  const bool hierarchical_wanted_;  // CommunicatorOptions::hierarchical
  const bool check_args_;           // CommunicatorOptions::check_arguments
  Workspace workspace_;
  uint64_t seq_ = 0;
  bool shm_algorithms_ = false;
  std::optional<HostMap> hosts_;  // set: the hierarchical algorithms run
  uint64_t hierarchical_calls_ = 0;
  AllReduceAlgorithm last_all_reduce_ = AllReduceAlgorithm::kAuto;
};

}  // namespace collie
