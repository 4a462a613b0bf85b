#include "collie/nn/ddp.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <utility>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/process_group/timeline.h"

namespace collie::nn {

namespace {

// One rank's parameter signature: count, then per parameter ndim and dims.
std::vector<int64_t> signature_of(const std::vector<ParameterInfo>& params) {
  std::vector<int64_t> sig{static_cast<int64_t>(params.size())};
  for (const auto& p : params) {
    sig.push_back(static_cast<int64_t>(p.shape.size()));
    sig.insert(sig.end(), p.shape.begin(), p.shape.end());
  }
  return sig;
}

// Decodes parameter `index`'s shape from a signature; nullopt past the end.
std::optional<Shape> shape_in(const std::vector<int64_t>& sig, size_t index) {
  size_t pos = 1;
  for (size_t i = 0; i < static_cast<size_t>(sig.at(0)); ++i) {
    const auto ndim = static_cast<size_t>(sig.at(pos));
    if (i == index) return Shape(sig.begin() + pos + 1, sig.begin() + pos + 1 + ndim);
    pos += 1 + ndim;
  }
  return std::nullopt;
}

// At least one byte: a tiny cap means "one parameter per bucket".
size_t mb_to_bytes(double mb) {
  return std::max<size_t>(1, static_cast<size_t>(mb * 1024.0 * 1024.0));
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(Module& module, ProcessGroup& group,
                                                 DdpOptions options)
    : DistributedDataParallel(std::make_unique<ModuleModel>(module), nullptr, group, options) {}

DistributedDataParallel::DistributedDataParallel(DdpModel& model, ProcessGroup& group,
                                                 DdpOptions options)
    : DistributedDataParallel(nullptr, &model, group, options) {}

DistributedDataParallel::DistributedDataParallel(std::unique_ptr<ModuleModel> owned,
                                                 DdpModel* model, ProcessGroup& group,
                                                 DdpOptions options)
    : module_model_(std::move(owned)),
      model_(model != nullptr ? *model : *module_model_),
      group_(&group),
      options_(options) {
  COLLIE_ARG_CHECK(options.bucket_cap_mb > 0 && options.first_bucket_cap_mb > 0,
                   "DDP bucket caps must be positive (bucket_cap_mb ", options.bucket_cap_mb,
                   ", first_bucket_cap_mb ", options.first_bucket_cap_mb, ")");
  verify_parameter_shapes();
  if (options.broadcast_parameters) broadcast_parameters();
  reducer_ = std::make_unique<Reducer>(
      model_, group,
      ReducerOptions{.first_bucket_bytes = mb_to_bytes(options.first_bucket_cap_mb),
                     .bucket_bytes = mb_to_bytes(options.bucket_cap_mb),
                     .timeout = options.timeout});
}

void DistributedDataParallel::set_process_group(ProcessGroup& group) noexcept {
  input_ = nullptr;
  reducer_->set_process_group(group);
  group_ = &group;
}

Module& DistributedDataParallel::module() {
  auto* wrapped = dynamic_cast<ModuleModel*>(&model_);
  COLLIE_CHECK(
      wrapped != nullptr,
      "DistributedDataParallel::module(): the wrapped model is not a host Module; use model()");
  return wrapped->module();
}

// Runs a collective on buffers of the model's device, ordered after (and
// waited for on) its compute stream.
void DistributedDataParallel::run_collective(const std::function<std::shared_ptr<Work>()>& launch) {
  model_.ops().with_compute_stream([&] { launch()->synchronize(); });
}

void DistributedDataParallel::verify_parameter_shapes() {
  const int world = group_->size();
  if (world == 1) return;
  // Two all_gathers: the signatures' lengths, then the signatures padded to
  // the longest (all_gather needs equal counts on every rank). They run on
  // the parameters' device (the nccl backend takes no host buffers).
  DeviceOps& ops = model_.ops();
  const auto params = model_.parameter_info();
  std::vector<int64_t> sig = signature_of(params);
  const int64_t length = static_cast<int64_t>(sig.size());
  std::vector<int64_t> lengths(world);
  {
    DeviceBuffer<int64_t> in(ops, 1), out(ops, lengths.size());
    in.copy_from_host(&length);
    run_collective(
        [&] { return group_->all_gather(out.view(), in.view(), {.timeout = options_.timeout}); });
    out.copy_to_host(lengths.data());
  }
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  sig.resize(static_cast<size_t>(longest), -1);
  std::vector<int64_t> all(static_cast<size_t>(longest) * world);
  {
    DeviceBuffer<int64_t> in(ops, sig.size()), out(ops, all.size());
    in.copy_from_host(sig.data());
    run_collective(
        [&] { return group_->all_gather(out.view(), in.view(), {.timeout = options_.timeout}); });
    out.copy_to_host(all.data());
  }

  auto rank_sig = [&](int r) {
    return std::vector<int64_t>(all.begin() + r * longest, all.begin() + r * longest + lengths[r]);
  };
  const auto reference = rank_sig(0);
  for (int r = 1; r < world; ++r) {
    const auto other = rank_sig(r);
    if (other == reference) continue;
    if (other[0] != reference[0])
      throw InvalidArgument(str_cat("DistributedDataParallel: rank 0 has ", reference[0],
                                    " parameters but rank ", r, " has ", other[0],
                                    "; every rank must build the same model"));
    for (size_t i = 0; i < static_cast<size_t>(reference[0]); ++i) {
      auto a = shape_in(reference, i), b = shape_in(other, i);
      if (a != b) {
        const std::string name = i < params.size() ? params[i].name : "?";
        throw InvalidArgument(str_cat("DistributedDataParallel: parameter ", i, " ('", name,
                                      "') has shape ", shape_to_string(*a), " on rank 0 but ",
                                      shape_to_string(*b), " on rank ", r,
                                      "; every rank must build the same model"));
      }
    }
  }
}

void DistributedDataParallel::broadcast_parameters() {
  if (group_->size() == 1) return;
  // One flat broadcast instead of one per parameter: a handful of large
  // messages is what the ring (and NCCL) is good at. The flat buffer lives
  // on the parameters' device; the copies in and out stay there.
  DeviceOps& ops = model_.ops();
  const auto params = model_.parameter_info();
  size_t total = 0;
  for (const auto& p : params) total += p.numel();
  DeviceBuffer<float> flat(ops, total);
  size_t pos = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const TensorView p = model_.parameter(i);
    ops.copy(flat.data() + pos, p.data, p.nbytes());
    pos += p.count;
  }
  run_collective(
      [&] { return group_->broadcast(flat.view(), {.root = 0, .timeout = options_.timeout}); });
  pos = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const TensorView p = model_.parameter(i);
    ops.copy(p.data, flat.data() + pos, p.nbytes());
    pos += p.count;
  }
}

const Tensor& DistributedDataParallel::forward(const Tensor& input) {
  // Armed in eval mode too: torch prepares whenever grad is enabled, and an
  // evaluation forward that is never followed by backward costs nothing.
  reducer_->prepare_for_backward();
  input_ = &input;
  const int64_t start = timeline::enabled() ? timeline::now_ns() : 0;
  model_.forward(input, output_);
  if (start != 0) timeline::span("ddp", "forward", start, timeline::now_ns(), {}, "ddp");
  return output_;
}

void DistributedDataParallel::backward(const Tensor& grad_output) {
  COLLIE_ARG_CHECK(input_ != nullptr, "DistributedDataParallel::backward before forward");
  const Tensor* input = std::exchange(input_, nullptr);
  // Timeline: the module's backward (during which the buckets' all_reduces
  // start), then the wait for the all_reduces still running.
  const int64_t start = timeline::enabled() ? timeline::now_ns() : 0;
  try {
    model_.backward(*input, output_, grad_output);
  } catch (...) {
    // A failed all_reduce launch (broken group) or a bad gradient: leave
    // the reducer ready for the next forward rather than wedged.
    reducer_->abandon_backward();
    throw;
  }
  backward_compute_end_ = Clock::now();
  const int64_t compute_end = start != 0 ? timeline::now_ns() : 0;
  reducer_->finalize_backward();
  if (start != 0) {
    timeline::span("ddp", "backward", start, compute_end, {}, "ddp");
    timeline::span("ddp", "wait for all_reduces", compute_end, timeline::now_ns(), {}, "ddp");
  }
}

}  // namespace collie::nn
