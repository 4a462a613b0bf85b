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
#include <string>
#include <vector>

#include "rendezvous/store.h"
#include "runtime/api/backend_registry.h"
#include "runtime/api/group.h"
#include "runtime/api/print.h"
#include "runtime/base/deadline.h"
#include "runtime/base/types.h"
#include "runtime/process_group/process_group.h"
#include "runtime/process_group/work.h"

namespace collie {

struct InitOptions {
  // "socket", "nccl" or "auto" (nccl when built with NCCL and a CUDA device
  // is visible, else socket).
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
  // The socket backend's channels: "auto" (shared memory between ranks on
  // one host, TCP between hosts), "tcp" or "shm". "" = COLLIE_TRANSPORT,
  // else auto.
  std::string transport;
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

}  // namespace collie
