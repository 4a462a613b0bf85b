#include "nn/ddp.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "runtime/base/check.h"
#include "runtime/base/error.h"
#include "runtime/base/str_cat.h"

namespace collie::nn {

namespace {

// One rank's parameter signature: count, then per parameter ndim and dims.
std::vector<int64_t> signature_of(Module& module) {
  auto params = module.parameters();
  std::vector<int64_t> sig{static_cast<int64_t>(params.size())};
  for (auto* p : params) {
    sig.push_back(static_cast<int64_t>(p->shape().size()));
    sig.insert(sig.end(), p->shape().begin(), p->shape().end());
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
size_t mb_to_bytes(double mb) { return std::max<size_t>(1, static_cast<size_t>(mb * 1024.0 * 1024.0)); }

}  // namespace

DistributedDataParallel::DistributedDataParallel(Module& module, ProcessGroup& group, DdpOptions options)
    : module_(module), group_(group), options_(options) {
  COLLIE_ARG_CHECK(options.bucket_cap_mb > 0 && options.first_bucket_cap_mb > 0,
                   "DDP bucket caps must be positive (bucket_cap_mb ", options.bucket_cap_mb,
                   ", first_bucket_cap_mb ", options.first_bucket_cap_mb, ")");
  verify_parameter_shapes();
  if (options.broadcast_parameters) broadcast_parameters();
  reducer_ = std::make_unique<Reducer>(module.named_parameters(), group,
                                       ReducerOptions{.first_bucket_bytes = mb_to_bytes(options.first_bucket_cap_mb),
                                                      .bucket_bytes = mb_to_bytes(options.bucket_cap_mb),
                                                      .timeout = options.timeout});
}

void DistributedDataParallel::verify_parameter_shapes() {
  const int world = group_.size();
  if (world == 1) return;
  // Two all_gathers: the signatures' lengths, then the signatures padded to
  // the longest (all_gather needs equal counts on every rank).
  std::vector<int64_t> sig = signature_of(module_);
  int64_t length = static_cast<int64_t>(sig.size());
  std::vector<int64_t> lengths(world);
  group_.all_gather(view(lengths.data(), lengths.size()), view(&length, 1), {.timeout = options_.timeout})->wait();
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  sig.resize(static_cast<size_t>(longest), -1);
  std::vector<int64_t> all(static_cast<size_t>(longest) * world);
  group_.all_gather(view(all.data(), all.size()), view(sig.data(), sig.size()), {.timeout = options_.timeout})->wait();

  auto names = module_.named_parameters();
  auto rank_sig = [&](int r) {
    return std::vector<int64_t>(all.begin() + r * longest, all.begin() + r * longest + lengths[r]);
  };
  const auto reference = rank_sig(0);
  for (int r = 1; r < world; ++r) {
    const auto other = rank_sig(r);
    if (other == reference) continue;
    if (other[0] != reference[0])
      throw InvalidArgument(str_cat("DistributedDataParallel: rank 0 has ", reference[0], " parameters but rank ",
                                    r, " has ", other[0], "; every rank must build the same model"));
    for (size_t i = 0; i < static_cast<size_t>(reference[0]); ++i) {
      auto a = shape_in(reference, i), b = shape_in(other, i);
      if (a != b) {
        const std::string name = i < names.size() ? names[i].first : "?";
        throw InvalidArgument(str_cat("DistributedDataParallel: parameter ", i, " ('", name, "') has shape ",
                                      shape_to_string(*a), " on rank 0 but ", shape_to_string(*b), " on rank ", r,
                                      "; every rank must build the same model"));
      }
    }
  }
}

void DistributedDataParallel::broadcast_parameters() {
  if (group_.size() == 1) return;
  // One flat broadcast instead of one per parameter: a handful of large
  // messages is what the ring is good at.
  auto params = module_.parameters();
  std::vector<float> flat;
  flat.reserve(module_.num_parameters());
  for (auto* p : params) flat.insert(flat.end(), p->data(), p->data() + p->numel());
  group_.broadcast(view(flat.data(), flat.size()), {.root = 0, .timeout = options_.timeout})->wait();
  size_t pos = 0;
  for (auto* p : params) {
    std::copy(flat.begin() + pos, flat.begin() + pos + p->numel(), p->data());
    pos += p->numel();
  }
}

const Tensor& DistributedDataParallel::forward(const Tensor& input) {
  // Armed in eval mode too: torch prepares whenever grad is enabled, and an
  // evaluation forward that is never followed by backward costs nothing.
  reducer_->prepare_for_backward();
  input_ = &input;
  module_.forward(input, output_);
  return output_;
}

void DistributedDataParallel::backward(const Tensor& grad_output) {
  COLLIE_ARG_CHECK(input_ != nullptr, "DistributedDataParallel::backward before forward");
  const Tensor* input = std::exchange(input_, nullptr);
  try {
    module_.backward(*input, output_, grad_output, nullptr);
  } catch (...) {
    // A failed all_reduce launch (broken group) or a bad gradient: leave
    // the reducer ready for the next forward rather than wedged.
    reducer_->abandon_backward();
    throw;
  }
  backward_compute_end_ = Clock::now();
  reducer_->finalize_backward();
}

}  // namespace collie::nn
