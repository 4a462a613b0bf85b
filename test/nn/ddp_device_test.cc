// DDP's device contract, checked on the CPU: a DdpModel whose DeviceOps
// claim another device (cuda:7) and record what DDP does with them, over a
// fake two-rank group whose other rank is this one's twin. What a GPU run
// depends on and this machine can check: the buckets and the construction's
// scratch buffers come from the model's ops and are all given back; every
// collective gets views labelled with the model's device, is launched and
// waited with the compute stream current (the nccl backend orders itself
// after the current stream, and Work::wait orders that stream after it);
// the 1/world scale goes through the ops once per bucket. The twin's average
// equals one rank's gradient exactly (x / 2 * 2), so training matches plain
// training bit for bit.
#include <catch2/catch.hpp>

#include <map>

#include "collie/base/error.h"
#include "collie/nn/ddp.h"
#include "collie/nn/loss.h"
#include "collie/nn/sequential.h"
#include "collie/nn/sgd.h"

using namespace collie;
using namespace collie::nn;

namespace {

class RecordingOps final : public DeviceOps {
 public:
  Device device() const override { return Device::cuda(7); }
  void* allocate(size_t bytes) override {
    void* p = HostOps::instance().allocate(bytes);
    if (p != nullptr) live[p] = bytes;
    return p;
  }
  void deallocate(void* p) noexcept override {
    live.erase(p);
    HostOps::instance().deallocate(p);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    HostOps::instance().copy(dst, src, bytes);
  }
  void scale(float* data, size_t count, float factor) override {
    ++scales;
    if (!owns(data, count * sizeof(float))) ++violations;
    HostOps::instance().scale(data, count, factor);
  }
  void with_compute_stream(const std::function<void()>& f) override {
    ++current;
    try {
      f();
    } catch (...) {
      --current;
      throw;
    }
    --current;
  }

  bool owns(const void* p, size_t bytes) const {
    for (auto& [start, size] : live) {
      auto* s = static_cast<const char*>(start);
      if (p >= s && static_cast<const char*>(p) + bytes <= s + size) return true;
    }
    return false;
  }

  std::map<void*, size_t> live;
  int current = 0;
  int scales = 0;
  int violations = 0;
};

class RecordingModel final : public DdpModel {
 public:
  explicit RecordingModel(Module& module) : inner_(module) {}
  DeviceOps& ops() override { return ops_; }
  std::vector<ParameterInfo> parameter_info() override { return inner_.parameter_info(); }
  TensorView parameter(size_t i) override {
    TensorView v = inner_.parameter(i);
    v.device = ops_.device();
    return v;
  }
  void use_grad_storage(size_t i, float* storage) override {
    if (!ops_.owns(storage, parameter_info()[i].numel() * sizeof(float))) ++ops_.violations;
    inner_.use_grad_storage(i, storage);
  }
  void use_own_grad_storage(size_t i) noexcept override { inner_.use_own_grad_storage(i); }
  void set_grad_ready_hook(size_t i, Hook hook) override {
    inner_.set_grad_ready_hook(i, std::move(hook));
  }
  void forward(const Tensor& input, Tensor& output) override { inner_.forward(input, output); }
  void backward(const Tensor& input, const Tensor& output, const Tensor& grad) override {
    inner_.backward(input, output, grad);
  }
  RecordingOps& recording() { return ops_; }

 private:
  ModuleModel inner_;
  RecordingOps ops_;
};

// A completed Work that checks it is waited with the compute stream current.
class CheckedWork final : public Work {
 public:
  explicit CheckedWork(RecordingOps& ops) : ops_(ops) {}
  bool is_completed() const override { return true; }
  bool is_success() const override { return true; }
  std::exception_ptr exception() const override { return nullptr; }
  void wait(Timeout) override {
    if (ops_.current == 0) ++ops_.violations;
  }

 private:
  RecordingOps& ops_;
};

// Rank 0 of two whose rank 1 holds exactly what rank 0 holds.
class TwinGroup final : public ProcessGroup {
 public:
  explicit TwinGroup(RecordingOps& ops) : ProcessGroup(0, 2), ops_(ops) {}
  std::string backend_name() const override { return "twin"; }

  std::shared_ptr<Work> all_reduce(TensorView t, const AllReduceOptions& o) override {
    check(t);
    ++all_reduces;
    COLLIE_CHECK(o.op == ReduceOp::kSum && t.dtype == DataType::kFloat32,
                 "DDP reduces float32 sums");
    for (size_t i = 0; i < t.count; ++i) t.as<float>()[i] *= 2.0f;
    return std::make_shared<CheckedWork>(ops_);
  }
  std::shared_ptr<Work> broadcast(TensorView t, const BroadcastOptions&) override {
    check(t);
    ++broadcasts;
    return std::make_shared<CheckedWork>(ops_);
  }
  std::shared_ptr<Work> all_gather(TensorView out, TensorView in,
                                   const AllGatherOptions&) override {
    check(in);
    check(out);
    ++all_gathers;
    for (int r = 0; r < 2; ++r)
      ops_.copy(static_cast<char*>(out.data) + r * in.nbytes(), in.data, in.nbytes());
    return std::make_shared<CheckedWork>(ops_);
  }
  std::shared_ptr<Work> barrier(const BarrierOptions&) override {
    return std::make_shared<CheckedWork>(ops_);
  }
  std::shared_ptr<Work> reduce_scatter(TensorView, TensorView,
                                       const ReduceScatterOptions&) override {
    throw Error("DDP does not reduce_scatter");
  }
  // DDP uses none of the rest of the ProcessGroup surface.
  std::shared_ptr<Work> all_gather(std::span<const TensorView>, TensorView,
                                   const AllGatherOptions&) override {
    throw Error("DDP does not all_gather lists");
  }
  std::shared_ptr<Work> reduce_scatter(TensorView, std::span<const TensorView>,
                                       const ReduceScatterOptions&) override {
    throw Error("DDP does not reduce_scatter");
  }
  std::shared_ptr<Work> reduce(TensorView, const ReduceOptions&) override {
    throw Error("DDP does not reduce");
  }
  std::shared_ptr<Work> gather(std::span<const TensorView>, TensorView,
                               const GatherOptions&) override {
    throw Error("DDP does not gather");
  }
  std::shared_ptr<Work> scatter(TensorView, std::span<const TensorView>,
                                const ScatterOptions&) override {
    throw Error("DDP does not scatter");
  }
  std::shared_ptr<Work> all_to_all(std::span<const TensorView>, std::span<const TensorView>,
                                   const AllToAllOptions&) override {
    throw Error("DDP does not all_to_all");
  }
  std::shared_ptr<Work> all_to_all_single(TensorView, TensorView, std::span<const size_t>,
                                          std::span<const size_t>,
                                          const AllToAllOptions&) override {
    throw Error("DDP does not all_to_all");
  }
  std::shared_ptr<Work> send(TensorView, int, const P2POptions&) override {
    throw Error("DDP does not send");
  }
  std::shared_ptr<Work> recv(TensorView, int, const P2POptions&) override {
    throw Error("DDP does not recv");
  }
  std::shared_ptr<Work> batch_isend_irecv(std::span<const P2POp>, Timeout) override {
    throw Error("DDP does not send");
  }
  void monitored_barrier(const MonitoredBarrierOptions&) override {}
  void shutdown(Timeout) override {}

  int all_reduces = 0, broadcasts = 0, all_gathers = 0;

 private:
  // On the model's device, in its memory, launched with its stream current.
  void check(const TensorView& t) {
    if (t.device != ops_.device() || !ops_.owns(t.data, t.nbytes()) || ops_.current == 0)
      ++ops_.violations;
  }
  RecordingOps& ops_;
};

void batch(int step, Tensor& x, std::vector<int64_t>& labels) {
  x.resize({6, 8});
  labels.resize(6);
  Generator g(step + 1);
  for (size_t i = 0; i < x.numel(); ++i) x[i] = g.uniform(-1.0f, 1.0f);
  for (int i = 0; i < 6; ++i) labels[i] = (step + i) % 3;
}

}  // namespace

TEST_CASE("DDP drives a device model through its DeviceOps: memory, labels, stream ordering",
          "[ddp]") {
  Sequential plain = make_mlp<float>({.sizes = {8, 16, 16, 3}, .seed = 4, .flatten = false});
  Sequential wrapped = make_mlp<float>({.sizes = {8, 16, 16, 3}, .seed = 4, .flatten = false});
  Sgd plain_opt(plain.parameters(), {.lr = 0.1, .momentum = 0.9});
  Sgd wrapped_opt(wrapped.parameters(), {.lr = 0.1, .momentum = 0.9});
  RecordingModel model(wrapped);
  RecordingOps& ops = model.recording();
  TwinGroup group(ops);
  {
    // One bucket per parameter: six buckets, six launches per step.
    DistributedDataParallel ddp(model, group, {.bucket_cap_mb = 1e-9, .first_bucket_cap_mb = 1e-9});
    CHECK(group.all_gathers == 2);  // the shape check
    CHECK(group.broadcasts == 1);   // rank 0's parameters
    REQUIRE(ddp.reducer().buckets().size() == 6);
    CHECK(ops.live.size() == 6);           // the scratch buffers are gone, the buckets stay
    CHECK_THROWS_AS(ddp.module(), Error);  // a DdpModel, not a host Module
    for (int step = 0; step < 3; ++step) {
      Tensor x, grad;
      std::vector<int64_t> labels;
      batch(step, x, labels);
      plain_opt.zero_grad();
      cross_entropy(plain.forward(x), labels, &grad);
      plain.backward(grad);
      plain_opt.step();
      wrapped_opt.zero_grad();
      cross_entropy(ddp.forward(x), labels, &grad);
      ddp.backward(grad);
      wrapped_opt.step();
    }
    CHECK(group.all_reduces == 18);
    CHECK(ops.scales == 18);
    CHECK(ops.current == 0);
  }
  CHECK(ops.violations == 0);
  CHECK(ops.live.empty());  // every bucket given back
  for (auto* p : wrapped.parameters()) CHECK_FALSE(p->uses_external_grad_storage());
  for (size_t k = 0; k < plain.parameters().size(); ++k) {
    auto a = plain.parameters()[k]->value().span(), b = wrapped.parameters()[k]->value().span();
    CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
  }
}
