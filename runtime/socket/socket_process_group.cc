#include "runtime/socket/socket_process_group.h"

#include "runtime/base/check.h"
#include "runtime/base/logging.h"
#include "runtime/base/str_cat.h"

namespace collie {
namespace {

std::string describe_what(const std::string& group_name, int rank, int size) {
  return str_cat("process group \"", group_name, "\" (socket, rank ", rank, " of ", size, ")");
}

std::string shape(const TensorView& t) { return str_cat(t.dtype, " x ", t.count); }

}  // namespace

std::shared_ptr<SocketProcessGroup> SocketProcessGroup::create(const BackendContext& context,
                                                               const CommunicatorOptions& options) {
  COLLIE_ARG_CHECK(context.store != nullptr, "the socket backend needs a store");
  COLLIE_ARG_CHECK(context.size >= 1, "world size ", context.size);
  COLLIE_ARG_CHECK(context.rank >= 0 && context.rank < context.size, "rank ", context.rank,
                   " is out of range for world size ", context.size);
  CommunicatorOptions comm_options = options;
  comm_options.timeout = context.timeout;
  if (!context.transport.empty()) comm_options.transport = context.transport;
  // The group name keeps the groups' keys and message headers apart even if
  // two groups share one store.
  comm_options.store_prefix = str_cat("socket/", context.group_name);
  auto communicator =
      Communicator::connect(*context.store, context.rank, context.size, comm_options);
  COLLIE_LOG(kInfo) << describe_what(context.group_name, context.rank, context.size)
                    << " connected at " << communicator->address();
  return std::make_shared<SocketProcessGroup>(std::move(communicator), context.store,
                                              context.timeout, context.group_name);
}

SocketProcessGroup::SocketProcessGroup(std::unique_ptr<Communicator> communicator,
                                       std::shared_ptr<Store> store, Timeout timeout,
                                       std::string group_name)
    : ProcessGroup(communicator->rank(), communicator->size()),
      group_name_(std::move(group_name)),
      timeout_(resolve_timeout(timeout)),
      store_(std::move(store)),
      communicator_(std::move(communicator)),
      queue_(describe_what(group_name_, rank_, size_)) {}

SocketProcessGroup::~SocketProcessGroup() { shutdown(); }

CallSite SocketProcessGroup::site(std::string_view op) const {
  return CallSite{op, rank_, group_name_, kBackendName};
}

std::shared_ptr<Work> SocketProcessGroup::all_reduce(TensorView tensor,
                                                     const AllReduceOptions& options) {
  CallSite where = site("all_reduce");
  check_tensor(where, "tensor", tensor, DeviceType::kCPU);
  check_reduce_op(where, options.op, tensor.dtype);
  check_timeout(where, options.timeout);
  auto* comm = communicator_.get();
  const AllReduceAlgorithm algorithm = all_reduce_algorithm_.load(std::memory_order_relaxed);
  return enqueue(options.async_op, "all_reduce",
                 str_cat(shape(tensor), ", ", options.op, ", ", to_string(algorithm)),
                 op_timeout(options.timeout),
                 [comm, tensor, op = options.op, algorithm](const Deadline& deadline) {
                   comm->all_reduce(tensor, tensor, op, deadline, algorithm);
                 });
}

std::shared_ptr<Work> SocketProcessGroup::broadcast(TensorView tensor,
                                                    const BroadcastOptions& options) {
  CallSite where = site("broadcast");
  check_tensor(where, "tensor", tensor, DeviceType::kCPU);
  check_root(where, options.root, size_);
  check_timeout(where, options.timeout);
  auto* comm = communicator_.get();
  int root = options.root;
  return enqueue(options.async_op, "broadcast", str_cat(shape(tensor), ", root ", root),
                 op_timeout(options.timeout), [comm, tensor, root](const Deadline& deadline) {
                   comm->broadcast(tensor, root, deadline);
                 });
}

std::shared_ptr<Work> SocketProcessGroup::barrier(const BarrierOptions& options) {
  check_timeout(site("barrier"), options.timeout);
  auto* comm = communicator_.get();
  return enqueue(options.async_op, "barrier", str_cat(size_, size_ == 1 ? " rank" : " ranks"),
                 op_timeout(options.timeout),
                 [comm](const Deadline& deadline) { comm->barrier(deadline); });
}

std::shared_ptr<Work> SocketProcessGroup::all_gather(TensorView output, TensorView input,
                                                     const AllGatherOptions& options) {
  CallSite where = site("all_gather");
  check_tensor(where, "input", input, DeviceType::kCPU);
  check_tensor(where, "output", output, DeviceType::kCPU);
  check_gather_shapes(where, output, "output", input, "input", size_);
  check_timeout(where, options.timeout);
  auto* comm = communicator_.get();
  return enqueue(options.async_op, "all_gather", shape(input), op_timeout(options.timeout),
                 [comm, input, output](const Deadline& deadline) {
                   comm->all_gather(input, output, deadline);
                 });
}

std::shared_ptr<Work> SocketProcessGroup::reduce_scatter(TensorView output, TensorView input,
                                                         const ReduceScatterOptions& options) {
  CallSite where = site("reduce_scatter");
  check_tensor(where, "input", input, DeviceType::kCPU);
  check_tensor(where, "output", output, DeviceType::kCPU);
  check_gather_shapes(where, input, "input", output, "output", size_);
  check_reduce_op(where, options.op, input.dtype);
  check_timeout(where, options.timeout);
  auto* comm = communicator_.get();
  ReduceOp op = options.op;
  return enqueue(options.async_op, "reduce_scatter", str_cat(shape(output), " per rank, ", op),
                 op_timeout(options.timeout), [comm, input, output, op](const Deadline& deadline) {
                   comm->reduce_scatter(input, output, op, deadline);
                 });
}

std::shared_ptr<Work> SocketProcessGroup::enqueue(bool async_op, const std::string& kind,
                                                  const std::string& details, Timeout timeout,
                                                  std::function<void(const Deadline&)> op) {
  return async_op ? queue_.submit(kind, details, timeout, std::move(op))
                  : queue_.run_or_submit(kind, details, timeout, std::move(op));
}

void SocketProcessGroup::shutdown(Timeout timeout) {
  check_timeout(site("shutdown"), timeout);
  auto* comm = communicator_.get();
  queue_.shutdown(resolve_timeout(timeout, timeout_), [comm] { comm->abort(); });
}

}  // namespace collie
