// torch.distributed's surface in C++: the calls a DDP training script makes,
// with torch's names and semantics, on a process-wide default group.
//
//   collie::init_process_group({.backend = "auto"});    // env:// by default
//   collie::setup_for_distributed(collie::is_main_process());
//   collie::all_reduce(collie::view(grads.data(), grads.size()));
//   collie::barrier();
//   collie::destroy_process_group();
//
// Where the store comes from (the first that applies, as torch decides):
//  1. options.store, given by the caller (rank and world_size required);
//  2. TORCHELASTIC_USE_AGENT_STORE=True (collie-run, torchrun): every rank is
//     a client of the launcher's TcpStore at MASTER_ADDR:MASTER_PORT, under
//     torch's per-attempt prefix "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>";
//  3. options.init_method: "env://" (default: rank 0 hosts a TcpStore at
//     MASTER_ADDR:MASTER_PORT), "tcp://host:port", "file:///path".
// The default group's keys live under "default_pg/", as in torch.
//
// Collectives take a Group (default: the default group) and, like torch,
// block unless async_op is true; either way they return the Work.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/base/types.h"
#include "collie/rendezvous/store.h"
#include "collie/runtime/api/backend_registry.h"
#include "collie/runtime/api/group.h"
#include "collie/runtime/api/print.h"
#include "collie/runtime/process_group/flight_recorder.h"  // dump_flight_recorder()
#include "collie/runtime/process_group/process_group.h"
#include "collie/runtime/process_group/work.h"

namespace collie {

struct InitOptions {
  // One backend per device type, torch 2.x's syntax: "cpu:cpu,cuda:nccl";
  // "cpu" (cpu buffers; "socket" is its old name) or "nccl" (cuda buffers)
  // alone; "auto": cpu
  // for cpu, plus nccl for cuda when built with NCCL and a GPU is visible
  // (otherwise a cuda buffer is refused, saying why). See backend_registry.h.
  std::string backend = "auto";
  // "" means "env://" (ignored when `store` is given).
  std::string init_method;
  // -1: from the init method or the environment (RANK, WORLD_SIZE, or the
  // SLURM / Open MPI equivalents).
  int world_size = -1;
  int rank = -1;
  // Bounds the rendezvous and is every collective's default deadline;
  // kUnsetTimeout means kDefaultTimeout (30 min, like torch).
  Timeout timeout = kUnsetTimeout;
  // A store the caller set up (torch's store=); shared with the caller.
  std::shared_ptr<Store> store;
  // Accepted for torch compatibility; the default group is always "0".
  std::string group_name;
  // The cpu backend's channels: "auto" (shared memory between ranks on
  // one host, TCP between hosts), "tcp" or "shm". "" = COLLIE_TRANSPORT,
  // else auto.
  std::string transport;
  // Join the running default group as a new rank (a replacement for a
  // failed one) instead of forming it: the members admit this process at
  // their next admit_joiners(); rank and world size come from them.
  // COLLIE_REPLACEMENT=1 (set by collie-run --on-failure=replace) turns
  // it on. Only the cpu backend can be joined.
  bool join = false;
};

// Collective; throws InvalidArgument (bad options, already initialized),
// BackendError (backend cannot run here), StoreError/TimeoutError
// (rendezvous). Sets the log prefix to this rank.
void init_process_group(const InitOptions& options = {});

// collie is always built with distributed support (torch's is_available()).
bool is_available();
bool is_initialized();
// The tutorial's helper: is_available() && is_initialized().
bool is_dist_avail_and_initialized();
// torch's is_nccl_available() and friends: is_backend_available("nccl")
// (runtime/api/backend_registry.h).

// This rank in `group` (-1 for a non-member); throws Error when the default
// group is not initialized.
int get_rank(const Group& group = {});
int get_world_size(const Group& group = {});
std::string get_backend(const Group& group = {});
// The tutorial's is_main_process(): rank 0, or not distributed at all.
bool is_main_process();
// Throws Error when not initialized.
std::shared_ptr<ProcessGroup> get_default_group();

// Collective over the default group: every rank calls it with the same
// ranks (any order; sorted like torch; empty = all). Ranks outside get a
// non-member Group. `backend` "" = the default group's; `timeout` unset = the
// default group's.
Group new_group(std::vector<int> ranks = {}, Timeout timeout = kUnsetTimeout,
                const std::string& backend = "");

// torch's shrink_group: the ranks of `group` that stay (every rank not in
// `ranks_to_exclude`, given in `group`'s numbering) make a new group without
// the failed ones, and carry on. Collective among the survivors; the ranks
// excluded must not call it. The survivors agree through the store on who
// is left out: the ranks named here, the ranks any survivor saw fail, and
// any rank that does not take part before options.timeout (the group's
// timeout when unset) passes (runtime/process_group/shrink_agreement.h).
// `group` is revoked: its pending and later calls fail at once. Ranks are
// renumbered densely in the old order. Shrinking the default group replaces
// it (get_rank() and get_world_size() answer for the new one) and shuts
// every sub-group down, as torch does, since their ranks no longer mean
// what they did; a sub-group's shrink returns the new sub-group. Needs a
// store that outlived the failed ranks (collie-run's or torchrun's agent
// store, collie-store, file://): with env:// or tcp:// the store lives in
// rank 0, and shrinking after rank 0 died fails at once saying so.
// `excluded`, when given, gets the ranks the survivors left out (in `group`'s
// numbering).
Group shrink_group(std::vector<int> ranks_to_exclude = {}, const Group& group = {},
                   const ShrinkOptions& options = {}, std::vector<int>* excluded = nullptr);

// The members' side of a replacement joining (InitOptions::join): every
// member of the default group calls it at the same point (a step boundary).
// When no process asked to join it costs two store round trips on rank 0
// and an all_reduce of three integers, and returns 0. Otherwise the default group is
// replaced by one with the joiners as its last ranks (the members keep
// theirs) and it returns how many joined; hand them the state they need
// (broadcast the model from rank 0). `timeout`: the group's when unset.
int admit_joiners(Timeout timeout = kUnsetTimeout);

// Shuts `group` down (waiting up to its timeout for issued collectives);
// the default group takes every sub-group with it and leaves collie
// uninitialized, so init_process_group may run again.
void destroy_process_group(const Group& group = {});

std::shared_ptr<Work> all_reduce(TensorView tensor, ReduceOp op = ReduceOp::kSum,
                                 const Group& group = {}, bool async_op = false);
// `src` is a rank of the default group (torch's convention), which must be
// in `group`.
std::shared_ptr<Work> broadcast(TensorView tensor, int src, const Group& group = {},
                                bool async_op = false);
std::shared_ptr<Work> barrier(const Group& group = {}, bool async_op = false);
// torch's all_gather_into_tensor: output.count == world * input.count.
std::shared_ptr<Work> all_gather(TensorView output, TensorView input, const Group& group = {},
                                 bool async_op = false);
// torch's reduce_scatter_tensor: input.count == world * output.count.
std::shared_ptr<Work> reduce_scatter(TensorView output, TensorView input,
                                     ReduceOp op = ReduceOp::kSum, const Group& group = {},
                                     bool async_op = false);

// torch's all_gather(tensor_list, tensor): tensor_list[r] receives rank r's
// tensor (one buffer per rank of the group, each like `tensor`).
std::shared_ptr<Work> all_gather(std::span<const TensorView> tensor_list, TensorView tensor,
                                 const Group& group = {}, bool async_op = false);
// torch's reduce_scatter(output, input_list): output = input_list[rank]
// reduced over every rank.
std::shared_ptr<Work> reduce_scatter(TensorView output, std::span<const TensorView> input_list,
                                     ReduceOp op = ReduceOp::kSum, const Group& group = {},
                                     bool async_op = false);
// torch's reduce(tensor, dst, op): only `dst` (a default-group rank)
// receives the result; the other ranks' tensors are left as they were.
std::shared_ptr<Work> reduce(TensorView tensor, int dst, ReduceOp op = ReduceOp::kSum,
                             const Group& group = {}, bool async_op = false);
// torch's gather(tensor, gather_list, dst): gather_list (on dst only; empty
// elsewhere) holds one buffer per rank of the group.
std::shared_ptr<Work> gather(TensorView tensor, std::span<const TensorView> gather_list,
                             int dst = 0, const Group& group = {}, bool async_op = false);
// torch's scatter(tensor, scatter_list, src): scatter_list on src only.
std::shared_ptr<Work> scatter(TensorView tensor, std::span<const TensorView> scatter_list,
                              int src = 0, const Group& group = {}, bool async_op = false);
// torch's all_to_all(output_tensor_list, input_tensor_list).
std::shared_ptr<Work> all_to_all(std::span<const TensorView> output_tensor_list,
                                 std::span<const TensorView> input_tensor_list,
                                 const Group& group = {}, bool async_op = false);
// torch's all_to_all_single; split sizes in elements (empty: equal parts).
std::shared_ptr<Work> all_to_all_single(TensorView output, TensorView input,
                                        std::span<const size_t> output_split_sizes = {},
                                        std::span<const size_t> input_split_sizes = {},
                                        const Group& group = {}, bool async_op = false);

// Point-to-point. Peers are default-group ranks (torch's convention); a
// message goes to the receive of the same tag from its sender, in FIFO order
// per (sender, tag), and must have its size. send/recv block; isend/irecv
// return the Work (its source_rank() is the sender's group rank).
void send(TensorView tensor, int dst, const Group& group = {}, int tag = 0);
// src kAnySource (torch's src=None): whoever sends first. Returns the
// sender's default-group rank.
int recv(TensorView tensor, int src = kAnySource, const Group& group = {}, int tag = 0);
std::shared_ptr<Work> isend(TensorView tensor, int dst, const Group& group = {}, int tag = 0);
std::shared_ptr<Work> irecv(TensorView tensor, int src = kAnySource, const Group& group = {},
                            int tag = 0);
// torch's batch_isend_irecv(p2p_op_list): every op at once, one Work per op
// (the same one: the batch completes together). Peers are default-group
// ranks; every op is on `group`.
std::vector<std::shared_ptr<Work>> batch_isend_irecv(std::span<const P2POp> p2p_op_list,
                                                     const Group& group = {});

// The object collectives, over byte strings (torch pickles objects; a C++
// caller serialises its own). They run on the group's backend for host
// buffers, and on a non-member rank do nothing (returning empty).
// torch's broadcast_object_list: `object` on every rank becomes src's.
void broadcast_object(std::string& object, int src, const Group& group = {});
// Every rank's object, in group rank order.
std::vector<std::string> all_gather_object(const std::string& object, const Group& group = {});
// On dst, every rank's object in group rank order; elsewhere empty.
std::vector<std::string> gather_object(const std::string& object, int dst = 0,
                                       const Group& group = {});
// torch's scatter_object_list: src passes one object per rank of the group
// (the others pass none); returns this rank's.
std::string scatter_object(std::span<const std::string> objects, int src = 0,
                           const Group& group = {});

// torch's monitored_barrier: like barrier, but on the timeout (the group's
// when unset) rank 0 throws TimeoutError naming the first rank that did not
// arrive, or every one with wait_all_ranks, and the other ranks throw too.
// It runs through the store, so it answers even when the data path hangs.
void monitored_barrier(const Group& group = {}, Timeout timeout = kUnsetTimeout,
                       bool wait_all_ranks = false);

}  // namespace collie
