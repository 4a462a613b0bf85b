// NcclProcessGroup's lifecycle: create (rendezvous of the unique id through
// the store, communicator init, stream, watchdog), shutdown and the checks
// every operation shares. The operations are in nccl_collectives.cc.
#include "collie/runtime/nccl/nccl_process_group.h"

#include <cstdlib>
#include <cstring>
#include <thread>

#include "collie/base/check.h"
#include "collie/base/logging.h"
#include "collie/runtime/nccl/nccl_impl.h"
#include "collie/runtime/nccl/nccl_info.h"

namespace collie {
namespace {

Timeout default_timeout(Timeout requested) {
  if (requested != kUnsetTimeout) return requested;
  if (const char* env = std::getenv("COLLIE_NCCL_TIMEOUT")) {
    char* end = nullptr;
    double seconds = std::strtod(env, &end);
    if (end == env || *end != '\0' || seconds <= 0)
      throw InvalidArgument(
          str_cat("COLLIE_NCCL_TIMEOUT='", env, "' is not a positive number of seconds"));
    return Timeout(static_cast<int64_t>(seconds * 1000));
  }
  return kDefaultTimeout;
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr &&
         (std::strcmp(v, "1") == 0 || std::strcmp(v, "true") == 0 || std::strcmp(v, "True") == 0);
}

// Rank 0 makes the unique id and publishes it; the others read it.
ncclUniqueId exchange_unique_id(Store& store, const NcclComm& comm) {
  const std::string key = comm.group_name() + "/nccl_unique_id";
  ncclUniqueId id;
  if (comm.rank() == 0) {
    // A record or mismatch notice left by an earlier group of this name in
    // the same store would be taken for this group's: clear them before
    // anyone can join (nobody publishes before init, which needs the id).
    store.delete_key(NcclWatchdog::mismatch_key(comm.group_name()));
    for (int r = 0; r < comm.size(); ++r)
      store.delete_key(NcclWatchdog::record_key(comm.group_name(), r));
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) throw BackendError(comm.describe(r, "ncclGetUniqueId"));
    store.set(key, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&id), sizeof id));
  } else {
    const Bytes bytes = store.get(key);
    if (bytes.size() != sizeof id)
      throw StoreError(str_cat("nccl backend: store key '", key, "' holds ", bytes.size(),
                               " bytes, expected an ncclUniqueId of ", sizeof id));
    std::memcpy(&id, bytes.data(), sizeof id);
  }
  return id;
}

}  // namespace

FrCall NcclProcessGroup::Impl::fr_call(const Launch& launch) {
  // torch's op names, as literals: recorder entries outlive the launch.
  static constexpr const char* kOps[] = {
      "all_reduce", "broadcast", "barrier",    "all_gather",        "reduce_scatter", "reduce",
      "gather",     "scatter",   "all_to_all", "all_to_all_single", "send",           "recv"};
  const std::string_view sig = launch.signature;
  const std::string_view name = sig.substr(0, sig.find('('));
  FrCall call;
  call.op = "coalesced";
  for (const char* op : kOps)
    if (name == op) call.op = op;
  call.p2p = !launch.collective;
  call.peer = launch.source_rank;
  call.algorithm = "nccl";
  call.transport = "nccl";
  // "(float32, 1024, ...": the dtype and the count, when the signature has them.
  const size_t open = sig.find('(');
  if (open != std::string_view::npos) {
    const std::string_view args = sig.substr(open + 1);
    const size_t comma = args.find(", ");
    if (auto dtype = parse_data_type(args.substr(0, comma))) {
      call.in_dtype = call.out_dtype = *dtype;
      call.in_tensors = call.out_tensors = 1;
      if (comma != std::string_view::npos)
        call.in_numel = call.out_numel = std::atoll(std::string(args.substr(comma + 2)).c_str());
    }
  }
  return call;
}

ncclDataType_t to_nccl(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kUInt8: return ncclUint8;
    case DataType::kInt8: return ncclInt8;
    case DataType::kBool: return ncclUint8;
  }
  throw InvalidArgument(str_cat("nccl backend: unsupported dtype ", static_cast<int>(dtype)));
}

ncclRedOp_t to_nccl(ReduceOp op, DataType dtype) {
  // bool is uint8 0/1 to NCCL: or is max, and is min (torch maps them so).
  if (dtype == DataType::kBool) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMax:
      case ReduceOp::kBor: return ncclMax;
      case ReduceOp::kProduct:
      case ReduceOp::kMin:
      case ReduceOp::kBand: return ncclMin;
      default: break;
    }
  }
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kProduct: return ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor: break;
  }
  throw InvalidArgument(str_cat("nccl backend: no NCCL reduction for ", op, " on ", dtype));
}

void NcclProcessGroup::Impl::check_reduce(const CallSite& where, ReduceOp op, DataType dtype) {
  collie::check_reduce_op(where, op, dtype);
  const bool bitwise = op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
  if (bitwise && !(dtype == DataType::kBool && op != ReduceOp::kBxor))
    throw InvalidArgument(str_cat(
        where.op, " on rank ", comm->rank(), ": the nccl backend cannot reduce ", dtype, " with ",
        op,
        ": NCCL has no bitwise reductions (only band/bor on bool, as min/max); reduce on the "
        "cpu backend (a cpu tensor) instead"));
}

std::string NcclProcessGroup::nccl_version() { return nccl::version_string(); }

void NcclProcessGroup::Impl::check_tensor(const CallSite& where, std::string_view name,
                                          const TensorView& t) {
  collie::check_tensor(where, name, t, DeviceType::kCUDA);
  if (t.device.index != comm->device())
    throw InvalidArgument(str_cat(where.op, " on rank ", comm->rank(), ": ", name, " is on ",
                                  t.device,
                                  " but this rank's communicator is on cuda:", comm->device()));
  if (t.count == 0) return;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, t.data) != cudaSuccess ||
      (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)) {
    cudaGetLastError();
    throw InvalidArgument(str_cat(where.op, " on rank ", comm->rank(), ": ", name, " pointer ",
                                  t.data, " is not CUDA device memory (it is labelled ", t.device,
                                  ")"));
  }
}

NcclProcessGroup::NcclProcessGroup(int rank, int size, std::unique_ptr<Impl> impl)
    : ProcessGroup(rank, size), impl_(std::move(impl)) {}

std::shared_ptr<NcclProcessGroup> NcclProcessGroup::create(std::shared_ptr<Store> store, int rank,
                                                           int size, const NcclOptions& options) {
  COLLIE_ARG_CHECK(store != nullptr, "nccl backend needs a store");
  COLLIE_ARG_CHECK(size >= 1 && rank >= 0 && rank < size, "nccl backend: rank ", rank,
                   " is not in a world of size ", size);
  const int devices = cuda::device_count();
  if (devices == 0)
    throw BackendError(str_cat("nccl backend: no CUDA device on rank ", rank, " (",
                               cuda::no_device_reason(), "); use backend \"cpu\" or \"auto\""));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->store = store;
  impl->timeout = default_timeout(options.timeout);
  impl->blocking_wait = options.blocking_wait || env_flag("COLLIE_NCCL_BLOCKING_WAIT");
  int device = options.device;
  if (device < 0) {
    const char* local = std::getenv("LOCAL_RANK");
    device = local ? std::atoi(local) : rank % devices;
  }
  COLLIE_ARG_CHECK(device >= 0 && device < devices, "nccl backend: rank ", rank,
                   " asked for cuda:", device, " but ", devices, " device(s) are visible");
  impl->comm = std::make_shared<NcclComm>(rank, size, device, options.group_name);
  cuda::set_device(device);
  const ncclUniqueId id = exchange_unique_id(*store, *impl->comm);
  impl->comm->init(id, Deadline(impl->timeout));

  cuda::check(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda::check(cudaEventCreateWithFlags(&impl->ready, cudaEventDisableTiming), "cudaEventCreate");
  cuda::check(cudaEventCreateWithFlags(&impl->captured, cudaEventDisableTiming), "cudaEventCreate");
  cuda::check(cudaMalloc(&impl->barrier_buffer, sizeof(float)), "cudaMalloc(barrier)");
  cuda::check(cudaMemset(impl->barrier_buffer, 0, sizeof(float)), "cudaMemset(barrier)");
  impl->watchdog = std::make_unique<NcclWatchdog>(impl->comm, store, impl->calls,
                                                  NcclWatchdog::options_from_env());
  std::vector<int> ranks(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) ranks[static_cast<size_t>(r)] = r;
  impl->fr_group = FlightRecorder::get().register_group(
      {options.group_name, options.group_name == "0" ? "default_pg" : "undefined", std::move(ranks),
       "nccl", rank});
  watch_for_dump_requests(store);
  COLLIE_LOG(kInfo) << "nccl backend: rank " << rank << "/" << size << " on cuda:" << device
                    << ", NCCL " << nccl_version();
  return std::shared_ptr<NcclProcessGroup>(new NcclProcessGroup(rank, size, std::move(impl)));
}

void NcclProcessGroup::shutdown(Timeout timeout) {
  auto& impl = *impl_;
  impl.watchdog->stop();
  cudaSetDevice(impl.comm->device());
  // Let the issued work finish (bounded), then finalize; a communicator that
  // cannot finish in time is aborted, never destroyed blocking.
  const Deadline deadline(resolve_timeout(timeout, impl.timeout));
  bool drained = false;
  while (!impl.comm->broken() && !deadline.expired()) {
    const cudaError_t e = cudaStreamQuery(impl.stream);
    if (e == cudaSuccess) {
      drained = true;
      break;
    }
    if (e != cudaErrorNotReady) break;
    std::this_thread::yield();
  }
  impl.comm->finalize(drained, deadline);
}

NcclProcessGroup::~NcclProcessGroup() {
  auto& impl = *impl_;
  shutdown(std::min<Timeout>(impl.timeout, std::chrono::seconds(30)));
  if (impl.barrier_buffer) cudaFree(impl.barrier_buffer);
  if (impl.ready) cudaEventDestroy(impl.ready);
  if (impl.captured) cudaEventDestroy(impl.captured);
  if (impl.stream) cudaStreamDestroy(impl.stream);
}

int NcclProcessGroup::device() const { return impl_->comm->device(); }
void* NcclProcessGroup::stream() const { return impl_->stream; }
bool NcclProcessGroup::broken() const { return impl_->comm->broken(); }
void NcclProcessGroup::abort(const std::string& reason) { impl_->comm->abort(reason); }

}  // namespace collie
