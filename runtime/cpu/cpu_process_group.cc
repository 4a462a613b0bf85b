#include "collie/runtime/cpu/cpu_process_group.h"

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/small_vector.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/process_group/monitored_barrier.h"

namespace collie {
namespace {

std::string shape(const TensorView& t) { return str_cat(t.dtype, " x ", t.count); }

// The transport as a literal (recorder entries outlive the group's strings).
const char* transport_literal(const std::string& transport) {
  if (transport == "tcp") return "tcp";
  if (transport == "shm") return "shm";
  return "auto";
}

std::vector<int> iota_ranks(int size) {
  std::vector<int> ranks(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) ranks[static_cast<size_t>(i)] = i;
  return ranks;
}

// A recorded call failed: the recorder keeps its error and, unless the
// caller passed a bad argument, dumps (and asks the other ranks to).
void record_failure(uint64_t id, const std::string& group, const char* op) {
  std::string what = "unknown exception";
  bool bad_argument = false, timeout = false;
  try {
    throw;
  } catch (const InvalidArgument& e) {
    what = e.what();
    bad_argument = true;
  } catch (const TimeoutError& e) {
    what = e.what();
    timeout = true;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  FlightRecorder::get().failed(id, what);
  if (!bad_argument)
    dump_on_failure(str_cat(op, " on process group \"", group, "\" failed: ", what), timeout);
}

}  // namespace

std::string CpuProcessGroup::describe_what(const std::string& group_name, int rank, int size,
                                           int generation) {
  return str_cat("process group \"", group_name, "\" (cpu, rank ", rank, " of ", size,
                 generation > 0 ? str_cat(", generation ", generation) : std::string(), ")");
}

CommunicatorOptions CpuProcessGroup::connect_options(const BackendContext& context,
                                                     const CommunicatorOptions& options) {
  CommunicatorOptions comm_options = CommunicatorOptions::from_env(options);
  comm_options.timeout = context.timeout;
  if (!context.transport.empty()) comm_options.transport = context.transport;
  if (comm_options.route_host.empty()) comm_options.route_host = context.route_host;
  // The group name keeps the groups' keys and message headers apart even if
  // two groups share one store.
  comm_options.store_prefix = str_cat("socket/", context.group_name);
  // Every call is checked once, here, at its top (collective_checks.h).
  comm_options.check_arguments = false;
  return comm_options;
}

std::shared_ptr<CpuProcessGroup> CpuProcessGroup::create(const BackendContext& context,
                                                         const CommunicatorOptions& options) {
  COLLIE_ARG_CHECK(context.store != nullptr, "the cpu backend needs a store");
  COLLIE_ARG_CHECK(context.size >= 1, "world size ", context.size);
  COLLIE_ARG_CHECK(context.rank >= 0 && context.rank < context.size, "rank ", context.rank,
                   " is out of range for world size ", context.size);
  CommunicatorOptions comm_options = connect_options(context, options);
  auto communicator =
      Communicator::connect(*context.store, context.rank, context.size, comm_options);
  COLLIE_LOG(kInfo) << describe_what(context.group_name, context.rank, context.size, 0)
                    << " connected at " << communicator->address();
  auto group = std::make_shared<CpuProcessGroup>(
      std::move(communicator), context.store, context.timeout, context.group_name,
      SerialExecutor::CallerPolicy::kOneAtATime, std::move(comm_options), 0, context.global_ranks,
      context.group_desc);
  // Another rank's failure asks this one to dump its flight recorder through
  // the store of the first group made (every rank's default group).
  if (context.store) watch_for_dump_requests(context.store);
  return group;
}

CpuProcessGroup::CpuProcessGroup(std::unique_ptr<Communicator> communicator,
                                 std::shared_ptr<Store> store, Timeout timeout,
                                 std::string group_name, SerialExecutor::CallerPolicy callers,
                                 CommunicatorOptions options, int generation,
                                 std::vector<int> global_ranks, std::string group_desc)
    : ProcessGroup(communicator->rank(), communicator->size()),
      group_name_(std::move(group_name)),
      timeout_(resolve_timeout(timeout)),
      global_ranks_(global_ranks.empty() ? iota_ranks(size_) : std::move(global_ranks)),
      group_desc_(!group_desc.empty()  ? std::move(group_desc)
                  : group_name_ == "0" ? "default_pg"
                                       : "undefined"),
      fr_transport_(transport_literal(options.transport)),
      fr_group_(FlightRecorder::get().register_group(
          FrGroupInfo{group_name_, group_desc_, global_ranks_, "collie", rank_})),
      options_(std::move(options)),
      generation_(generation),
      store_(std::move(store)),
      communicator_(std::move(communicator)),
      executor_(describe_what(group_name_, rank_, size_, generation_), callers,
                [this] { abort_communicator(); }) {
  p2p_link_->owner = this;
}

CpuProcessGroup::~CpuProcessGroup() {
  {
    std::unique_lock lock(p2p_link_->mu);
    p2p_link_->owner = nullptr;
  }
  shutdown();
}

CallSite CpuProcessGroup::site(std::string_view op) const {
  return CallSite{op, rank_, group_name_, kBackendName};
}

FrCall CpuProcessGroup::fr_call(const char* op, const TensorView& in, uint32_t in_tensors,
                                const TensorView& out, uint32_t out_tensors) const {
  FrCall call;
  call.op = op;
  call.in_dtype = in.dtype;
  call.out_dtype = out.dtype;
  call.in_tensors = in_tensors;
  call.out_tensors = out_tensors;
  call.in_numel = static_cast<int64_t>(in.count);
  call.out_numel = static_cast<int64_t>(out.count);
  call.transport = fr_transport_;
  return call;
}

template <typename DetailsFn, typename Fn>
std::shared_ptr<Work> CpuProcessGroup::enqueue(bool async_op, const FrCall& call,
                                               DetailsFn&& details, Timeout timeout, Fn&& op) {
  // Recorded when issued, started and completed (or failed) where it runs.
  // A blocking call mostly runs at once, on this thread: its start is its
  // issue, and completed() says so without another clock read.
  const uint64_t id = FlightRecorder::get().record(fr_group_, call, timeout.count(), !async_op);
  auto recorded = [&] {
    if constexpr (std::is_invocable_v<Fn&, const Deadline&>) {
      return [id, op = std::forward<Fn>(op), self = this, kind = call.op,
              async_op](const Deadline& deadline) mutable {
        FlightRecorder& fr = FlightRecorder::get();
        try {
          if (async_op) fr.started(id);
          op(deadline);
        } catch (...) {
          record_failure(id, self->group_name_, kind);
          self->after_failure(std::current_exception());
          throw;
        }
        fr.completed(id);
        if (!self->outstanding_.empty()) self->reap_p2p();
      };
    } else {
      return [id, op = std::forward<Fn>(op), self = this, kind = call.op, async_op](
                 const Deadline& deadline, CompletionWork& work) mutable {
        FlightRecorder& fr = FlightRecorder::get();
        try {
          if (async_op) fr.started(id);
          op(deadline, work);
        } catch (...) {
          record_failure(id, self->group_name_, kind);
          self->after_failure(std::current_exception());
          throw;
        }
        fr.completed(id);
        if (!self->outstanding_.empty()) self->reap_p2p();
      };
    }
  }();
  if (async_op) {
    return executor_.submit(call.op, SerialExecutor::Details(std::forward<DetailsFn>(details)),
                            timeout, SerialExecutor::to_op_fn(std::move(recorded)));
  }
  return executor_.run_or_submit(call.op, std::forward<DetailsFn>(details), timeout,
                                 std::move(recorded));
}

std::shared_ptr<Work> CpuProcessGroup::all_reduce(TensorView tensor,
                                                  const AllReduceOptions& options) {
  CallSite where = site("all_reduce");
  check_tensor(where, "tensor", tensor, DeviceType::kCPU);
  check_reduce_op(where, options.op, tensor.dtype);
  check_timeout(where, options.timeout);
  auto* comm = communicator_.get();
  const AllReduceAlgorithm algorithm = all_reduce_algorithm_.load(std::memory_order_relaxed);
  FrCall call = fr_call("all_reduce", tensor, 1, tensor, 1);
  call.reduce_op = static_cast<int>(options.op);
  call.algorithm = to_string(algorithm).data();
  return enqueue(
      options.async_op, call,
      [tensor, op = options.op, algorithm] {
        return str_cat(shape(tensor), ", ", op, ", ", to_string(algorithm));
      },
      op_timeout(options.timeout),
      [comm, tensor, op = options.op, algorithm](const Deadline& deadline) {
        comm->all_reduce(tensor, tensor, op, deadline, algorithm);
      });
}

std::shared_ptr<Work> CpuProcessGroup::broadcast(TensorView tensor,
                                                 const BroadcastOptions& options) {
  CallSite where = site("broadcast");
  check_tensor(where, "tensor", tensor, DeviceType::kCPU);
  check_root(where, options.root, size_);
  check_timeout(where, options.timeout);
  auto* comm = communicator_.get();
  int root = options.root;
  FrCall call = fr_call("broadcast", tensor, 1, tensor, 1);
  call.root = root;
  return enqueue(
      options.async_op, call, [tensor, root] { return str_cat(shape(tensor), ", root ", root); },
      op_timeout(options.timeout),
      [comm, tensor, root](const Deadline& deadline) { comm->broadcast(tensor, root, deadline); });
}

std::shared_ptr<Work> CpuProcessGroup::barrier(const BarrierOptions& options) {
  check_timeout(site("barrier"), options.timeout);
  auto* comm = communicator_.get();
  return enqueue(
      options.async_op, fr_call("barrier", TensorView{}, 0, TensorView{}, 0),
      [size = size_] { return str_cat(size, size == 1 ? " rank" : " ranks"); },
      op_timeout(options.timeout), [comm](const Deadline& deadline) { comm->barrier(deadline); });
}

std::shared_ptr<Work> CpuProcessGroup::all_gather(TensorView output, TensorView input,
                                                  const AllGatherOptions& options) {
  CallSite where = site("all_gather");
  check_tensor(where, "input", input, DeviceType::kCPU);
  check_tensor(where, "output", output, DeviceType::kCPU);
  check_gather_shapes(where, output, "output", input, "input", size_);
  check_timeout(where, options.timeout);
  auto* comm = communicator_.get();
  return enqueue(
      options.async_op, fr_call("all_gather", input, 1, output, 1),
      [input] { return shape(input); }, op_timeout(options.timeout),
      [comm, input, output](const Deadline& deadline) {
        comm->all_gather(input, output, deadline);
      });
}

std::shared_ptr<Work> CpuProcessGroup::reduce_scatter(TensorView output, TensorView input,
                                                      const ReduceScatterOptions& options) {
  CallSite where = site("reduce_scatter");
  check_tensor(where, "input", input, DeviceType::kCPU);
  check_tensor(where, "output", output, DeviceType::kCPU);
  check_gather_shapes(where, input, "input", output, "output", size_);
  check_reduce_op(where, options.op, input.dtype);
  check_timeout(where, options.timeout);
  auto* comm = communicator_.get();
  ReduceOp op = options.op;
  FrCall call = fr_call("reduce_scatter", input, 1, output, 1);
  call.reduce_op = static_cast<int>(op);
  return enqueue(
      options.async_op, call, [output, op] { return str_cat(shape(output), " per rank, ", op); },
      op_timeout(options.timeout),
      [comm, input, output, op](const Deadline& deadline) {
        comm->reduce_scatter(input, output, op, deadline);
      });
}

std::shared_ptr<Work> CpuProcessGroup::all_gather(std::span<const TensorView> outputs,
                                                  TensorView input,
                                                  const AllGatherOptions& options) {
  CallSite where = site("all_gather");
  check_tensor(where, "input", input, DeviceType::kCPU);
  check_tensor_list(where, "outputs", outputs, input, size_, DeviceType::kCPU);
  check_timeout(where, options.timeout);
  auto* comm = communicator_.get();
  return enqueue(
      options.async_op,
      fr_call("all_gather", input, 1, input, static_cast<uint32_t>(outputs.size())),
      [input] { return str_cat(shape(input), ", list"); }, op_timeout(options.timeout),
      [comm, input, out = SmallVector<TensorView>(outputs.begin(), outputs.end())](
          const Deadline& deadline) { comm->all_gather(input, out, deadline); });
}

std::shared_ptr<Work> CpuProcessGroup::reduce_scatter(TensorView output,
                                                      std::span<const TensorView> inputs,
                                                      const ReduceScatterOptions& options) {
  CallSite where = site("reduce_scatter");
  check_tensor(where, "output", output, DeviceType::kCPU);
  check_tensor_list(where, "inputs", inputs, output, size_, DeviceType::kCPU);
  check_reduce_op(where, options.op, output.dtype);
  check_timeout(where, options.timeout);
  auto* comm = communicator_.get();
  FrCall call = fr_call("reduce_scatter", output, static_cast<uint32_t>(inputs.size()), output, 1);
  call.reduce_op = static_cast<int>(options.op);
  return enqueue(
      options.async_op, call,
      [output, op = options.op] { return str_cat(shape(output), " per rank, ", op, ", list"); },
      op_timeout(options.timeout),
      [comm, output, op = options.op, in = SmallVector<TensorView>(inputs.begin(), inputs.end())](
          const Deadline& deadline) { comm->reduce_scatter(in, output, op, deadline); });
}

std::shared_ptr<Work> CpuProcessGroup::reduce(TensorView tensor, const ReduceOptions& options) {
  CallSite where = site("reduce");
  check_tensor(where, "tensor", tensor, DeviceType::kCPU);
  check_reduce_op(where, options.op, tensor.dtype);
  check_root(where, options.root, size_);
  check_timeout(where, options.timeout);
  auto* comm = communicator_.get();
  FrCall call = fr_call("reduce", tensor, 1, tensor, 1);
  call.reduce_op = static_cast<int>(options.op);
  call.root = options.root;
  return enqueue(
      options.async_op, call,
      [tensor, op = options.op, root = options.root] {
        return str_cat(shape(tensor), ", ", op, ", root ", root);
      },
      op_timeout(options.timeout),
      [comm, tensor, op = options.op, root = options.root](const Deadline& deadline) {
        comm->reduce(tensor, tensor, op, root, deadline);
      });
}

std::shared_ptr<Work> CpuProcessGroup::gather(std::span<const TensorView> outputs, TensorView input,
                                              const GatherOptions& options) {
  CallSite where = site("gather");
  check_tensor(where, "input", input, DeviceType::kCPU);
  check_root(where, options.root, size_);
  check_tensor_list(where, "outputs", outputs, input, rank_ == options.root ? size_ : 0,
                    DeviceType::kCPU);
  check_timeout(where, options.timeout);
  auto* comm = communicator_.get();
  FrCall call = fr_call("gather", input, 1, input, static_cast<uint32_t>(outputs.size()));
  call.root = options.root;
  return enqueue(
      options.async_op, call,
      [input, root = options.root] { return str_cat(shape(input), ", root ", root); },
      op_timeout(options.timeout),
      [comm, input, root = options.root,
       out = SmallVector<TensorView>(outputs.begin(), outputs.end())](const Deadline& deadline) {
        comm->gather(input, out, root, deadline);
      });
}

std::shared_ptr<Work> CpuProcessGroup::scatter(TensorView output,
                                               std::span<const TensorView> inputs,
                                               const ScatterOptions& options) {
  CallSite where = site("scatter");
  check_tensor(where, "output", output, DeviceType::kCPU);
  check_root(where, options.root, size_);
  check_tensor_list(where, "inputs", inputs, output, rank_ == options.root ? size_ : 0,
                    DeviceType::kCPU);
  check_timeout(where, options.timeout);
  auto* comm = communicator_.get();
  FrCall call = fr_call("scatter", output, static_cast<uint32_t>(inputs.size()), output, 1);
  call.root = options.root;
  return enqueue(
      options.async_op, call,
      [output, root = options.root] { return str_cat(shape(output), ", root ", root); },
      op_timeout(options.timeout),
      [comm, output, root = options.root,
       in = SmallVector<TensorView>(inputs.begin(), inputs.end())](const Deadline& deadline) {
        comm->scatter(in, output, root, deadline);
      });
}

std::shared_ptr<Work> CpuProcessGroup::all_to_all(std::span<const TensorView> outputs,
                                                  std::span<const TensorView> inputs,
                                                  const AllToAllOptions& options) {
  CallSite where = site("all_to_all");
  if (inputs.empty())
    throw InvalidArgument(str_cat("all_to_all on rank ", rank_, ": inputs holds no buffer"));
  check_tensor_list(where, "inputs", inputs, inputs[0], size_, DeviceType::kCPU, true);
  check_tensor_list(where, "outputs", outputs, inputs[0], size_, DeviceType::kCPU, true);
  check_timeout(where, options.timeout);
  auto* comm = communicator_.get();
  return enqueue(
      options.async_op,
      fr_call("all_to_all", inputs[0], static_cast<uint32_t>(inputs.size()),
              outputs.empty() ? inputs[0] : outputs[0], static_cast<uint32_t>(outputs.size())),
      [dtype = inputs[0].dtype] { return str_cat(dtype); }, op_timeout(options.timeout),
      [comm, in = SmallVector<TensorView>(inputs.begin(), inputs.end()),
       out = SmallVector<TensorView>(outputs.begin(), outputs.end())](const Deadline& deadline) {
        comm->all_to_all(in, out, deadline);
      });
}

std::shared_ptr<Work> CpuProcessGroup::all_to_all_single(TensorView output, TensorView input,
                                                         std::span<const size_t> output_split_sizes,
                                                         std::span<const size_t> input_split_sizes,
                                                         const AllToAllOptions& options) {
  CallSite where = site("all_to_all_single");
  check_tensor(where, "input", input, DeviceType::kCPU);
  check_tensor(where, "output", output, DeviceType::kCPU);
  if (input.dtype != output.dtype)
    throw InvalidArgument(str_cat("all_to_all_single on rank ", rank_, ": input is ", input.dtype,
                                  " but output is ", output.dtype));
  auto in = split_buffer(where, "input", input, input_split_sizes, size_);
  auto out = split_buffer(where, "output", output, output_split_sizes, size_);
  check_timeout(where, options.timeout);
  auto* comm = communicator_.get();
  return enqueue(
      options.async_op, fr_call("all_to_all_single", input, 1, output, 1),
      [dtype = input.dtype, from = input.count, to = output.count] {
        return str_cat(dtype, " x ", from, " -> ", to);
      },
      op_timeout(options.timeout),
      [comm, in = std::move(in), out = std::move(out)](const Deadline& deadline) {
        comm->all_to_all(in, out, deadline);
      });
}

std::shared_ptr<Work> CpuProcessGroup::send(TensorView tensor, int dst, const P2POptions& options) {
  CallSite where = site("send");
  check_tensor(where, "tensor", tensor, DeviceType::kCPU);
  check_peer(where, dst, size_, false);
  check_timeout(where, options.timeout);
  auto details = [tensor, dst, tag = options.tag] {
    return str_cat(shape(tensor), " to rank ", dst, ", tag ", tag);
  };
  const P2POp op{P2POpType::kIsend, tensor, dst, options.tag};
  if (!options.async_op) return run_p2p_blocking(std::move(details), options.timeout, op);
  return run_p2p(true, std::move(details), options.timeout, {op});
}

std::shared_ptr<Work> CpuProcessGroup::recv(TensorView tensor, int src, const P2POptions& options) {
  CallSite where = site("recv");
  check_tensor(where, "tensor", tensor, DeviceType::kCPU);
  check_peer(where, src, size_, true);
  check_timeout(where, options.timeout);
  auto details = [tensor, src, tag = options.tag] {
    return str_cat(shape(tensor), " from ",
                   src == kAnySource ? std::string("any rank") : str_cat("rank ", src), ", tag ",
                   tag);
  };
  const P2POp op{P2POpType::kIrecv, tensor, src, options.tag};
  // A receive from any source learns its sender as it runs: run_p2p's Work
  // carries it.
  if (!options.async_op && src != kAnySource)
    return run_p2p_blocking(std::move(details), options.timeout, op);
  return run_p2p(options.async_op, std::move(details), options.timeout, {op});
}

template <typename DetailsFn>
std::shared_ptr<Work> CpuProcessGroup::run_p2p_blocking(DetailsFn&& details, Timeout timeout,
                                                        const P2POp& op) {
  const bool send = op.type == P2POpType::kIsend;
  const FrCall call = fr_p2p_call(std::span<const P2POp>(&op, 1));
  auto* comm = communicator_.get();
  // An op that takes only the Deadline: run inline on an idle group, it
  // allocates nothing and its success is completed_work(), or a receive's
  // completed_work(source) (the sender is the named peer).
  auto work = enqueue(false, call, std::forward<DetailsFn>(details), op_timeout(timeout),
                      [comm, op](const Deadline& deadline) { comm->send_recv_one(op, deadline); });
  if (send) return work;
  if (work == completed_work()) return completed_work(op.peer);
  // Queued behind other ops: the executor's own Work, told its sender now.
  if (auto* w = dynamic_cast<CompletionWork*>(work.get())) w->set_source_rank(op.peer);
  return work;
}

std::shared_ptr<Work> CpuProcessGroup::batch_isend_irecv(std::span<const P2POp> ops,
                                                         Timeout timeout) {
  CallSite where = site("batch_isend_irecv");
  for (const P2POp& op : ops) {
    check_tensor(where, "tensor", op.tensor, DeviceType::kCPU);
    check_peer(where, op.peer, size_, false);
  }
  check_timeout(where, timeout);
  return run_p2p(
      true, [n = ops.size()] { return str_cat(n, " ops"); }, timeout,
      std::vector<P2POp>(ops.begin(), ops.end()));
}

FrCall CpuProcessGroup::fr_p2p_call(std::span<const P2POp> ops) const {
  // torch's recorder names a batch of several "coalesced".
  const char* kind = ops.size() != 1                    ? "coalesced"
                     : ops[0].type == P2POpType::kIsend ? "send"
                                                        : "recv";
  const TensorView first = ops.empty() ? TensorView{} : ops[0].tensor;
  FrCall call = fr_call(kind, first, 1, first, 1);
  if (ops.size() == 1) {
    call.p2p = true;
    call.peer = ops[0].peer;
  }
  return call;
}

std::shared_ptr<Work> CpuProcessGroup::run_p2p(bool async_op, SerialExecutor::Details details,
                                               Timeout timeout, std::vector<P2POp> ops) {
  const char* kind = ops.size() != 1                    ? "batch_isend_irecv"
                     : ops[0].type == P2POpType::kIsend ? "send"
                                                        : "recv";
  const FrCall call = fr_p2p_call(ops);
  auto* comm = communicator_.get();
  if (!async_op) {
    // Posted and waited for in one op: what is posted before it moves too.
    return enqueue(false, call, std::move(details), op_timeout(timeout),
                   [comm, ops = std::move(ops)](const Deadline& deadline, CompletionWork& work) {
                     const std::vector<int> sources = comm->send_recv(ops, deadline);
                     if (ops.size() == 1) work.set_source_rank(sources[0]);
                   });
  }
  // The op posts the batch; the P2PWork completes when the batch is done,
  // whichever later op (or wait) moves its last byte.
  auto describe = [details, kind, seq = executor_.submitted() + 1] {
    return str_cat(kind, " #", seq, " (", details(), ")");
  };
  auto work = std::make_shared<P2PWork>(std::move(describe), p2p_link_, op_timeout(timeout));
  const bool single_recv = ops.size() == 1 && ops[0].type == P2POpType::kIrecv;
  auto post =
      enqueue(true, call, std::move(details), op_timeout(timeout),
              [this, comm, ops = std::move(ops), work, single_recv](const Deadline& deadline) {
                auto batch = comm->post_p2p(ops, deadline);
                outstanding_.push_back(Outstanding{work, std::move(batch), single_recv});
              });
  work->set_post(std::move(post));
  return work;
}

void CpuProcessGroup::reap_p2p() {
  auto* comm = communicator_.get();
  std::erase_if(outstanding_, [comm](Outstanding& o) {
    if (!comm->p2p_done(*o.batch)) return false;
    if (o.single_recv) o.work->set_source_rank(o.batch->sources[0]);
    o.work->mark_completed();
    return true;
  });
}

void CpuProcessGroup::after_failure(std::exception_ptr error) {
  if (!outstanding_.empty() && communicator_ && communicator_->broken())
    fail_outstanding(std::move(error));
}

void CpuProcessGroup::fail_outstanding(std::exception_ptr error) {
  if (outstanding_.empty()) return;
  if (communicator_) communicator_->cancel_p2p();
  for (auto& o : outstanding_) o.work->mark_completed(error);
  outstanding_.clear();
}

std::shared_ptr<Work> CpuProcessGroup::drive(const std::shared_ptr<P2PWork>& work,
                                             Timeout timeout) {
  auto* comm = communicator_.get();
  return executor_.run_or_submit</*kLocal=*/true>(
      "send/recv wait", [work] { return work->description(); }, timeout,
      [this, comm, work](const Deadline& deadline) {
        try {
          for (auto& o : outstanding_) {
            if (o.work != work) continue;
            comm->wait_p2p(*o.batch, deadline);
            break;
          }
        } catch (...) {
          after_failure(std::current_exception());
          throw;
        }
        reap_p2p();
      });
}

std::exception_ptr CpuProcessGroup::poll() {
  if (auto error = executor_.broken_error()) return error;
  if (poll_queued_.exchange(true)) return nullptr;
  auto* comm = communicator_.get();
  executor_.submit_local(
      "send/recv poll", [] { return std::string(); }, op_timeout(kUnsetTimeout),
      SerialExecutor::to_op_fn([this, comm](const Deadline& deadline) {
        poll_queued_.store(false);
        try {
          comm->poll_p2p(deadline);
        } catch (...) {
          after_failure(std::current_exception());
          throw;
        }
        reap_p2p();
      }));
  return nullptr;
}

void CpuProcessGroup::monitored_barrier(const MonitoredBarrierOptions& options) {
  check_timeout(site("monitored_barrier"), options.timeout);
  // Through the queue, so that it waits behind the collectives issued
  // before it, like any call; the barrier itself goes through the store.
  const uint64_t seq = ++monitored_barriers_;
  const Timeout timeout = op_timeout(options.timeout);
  auto store = store_;
  const std::string prefix = str_cat(options_.store_prefix, "/");
  const int rank = rank_, size = size_;
  const bool all = options.wait_all_ranks;
  enqueue(
      false, fr_call("barrier", TensorView{}, 0, TensorView{}, 0),
      [seq] { return str_cat("#", seq); }, timeout,
      [=](const Deadline&) {
        if (!store) throw InvalidArgument("monitored_barrier needs the group's store");
        collie::monitored_barrier(*store, prefix, rank, size, seq, timeout, all);
      })
      ->wait();
}

void CpuProcessGroup::abort(const std::string& reason) {
  executor_.abort(std::make_exception_ptr(BackendError(reason)), [this] { abort_communicator(); });
}

void CpuProcessGroup::shutdown(Timeout timeout) {
  check_timeout(site("shutdown"), timeout);
  executor_.shutdown(resolve_timeout(timeout, timeout_), [this] { abort_communicator(); });
  fail_outstanding(std::make_exception_ptr(
      BackendError(str_cat(describe_what(group_name_, rank_, size_, generation_),
                           " was shut down before the point-to-point operation completed"))));
}

}  // namespace collie
