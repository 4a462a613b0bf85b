// DdpModel: what DistributedDataParallel and its Reducer need from the model
// they wrap, wherever its parameters live. torch's DDP gets this from
// nn.Module, autograd hooks and ATen; here it is one small interface with
// two implementations: ModuleModel, for any host Module (nn/module.h), and
// nn::cuda::CudaMlp, whose parameters and gradients are CUDA device memory.
// The device of the parameters decides everything device-specific (where the
// buckets are allocated, how they are scaled, which stream the collectives
// are ordered after) through ops(); the bucketing, the hooks, the launch
// order and the checks are the same code for both.
//
// Gradient storage. Like c10d's gradient_as_bucket_view, each parameter's
// gradient can be re-pointed into external storage on the same device (a
// slice of a DDP bucket): use_grad_storage(i, p) copies the current gradient
// to p, and from then on backward accumulates into p, until
// use_own_grad_storage(i) copies it back. The storage is contiguous:
// numel() floats, the parameter's shape row-major.
//
// Ready hooks. backward() calls parameter i's hook once its gradient for
// this backward is final (queued, on a GPU), before it carries on with the
// earlier layers, so that the bucket holding it can be reduced meanwhile.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collie/nn/device_ops.h"
#include "collie/nn/module.h"
#include "collie/nn/tensor.h"

namespace collie::nn {

struct ParameterInfo {
  std::string name;  // torch's state_dict key ("1.weight")
  Shape shape;
  size_t numel() const { return shape_numel(shape); }
};

class DdpModel {
 public:
  using Hook = std::function<void()>;
  virtual ~DdpModel() = default;

  // Memory operations on the parameters' device; ops().device() is it.
  virtual DeviceOps& ops() = 0;
  // Every parameter, in registration order.
  virtual std::vector<ParameterInfo> parameter_info() = 0;
  // Parameter i's values: numel() contiguous float32 on ops().device().
  virtual TensorView parameter(size_t i) = 0;

  virtual void use_grad_storage(size_t i, float* storage) = 0;
  // Never throws (destructors call it).
  virtual void use_own_grad_storage(size_t i) noexcept = 0;
  virtual void set_grad_ready_hook(size_t i, Hook hook) = 0;

  // The batch passes with host tensors at the edges, as Module's: forward
  // writes the output [B, ...]; backward takes the same input (alive since
  // forward), the output and d(loss)/d(output), accumulates the gradients
  // and fires the ready hooks.
  virtual void forward(const Tensor& input, Tensor& output) = 0;
  virtual void backward(const Tensor& input, const Tensor& output, const Tensor& grad_output) = 0;
};

// A host Module seen as a DdpModel: parameters are its named_parameters(),
// gradients move with Parameter::use_grad_storage, hooks are the
// parameters' grad-ready hooks.
class ModuleModel final : public DdpModel {
 public:
  explicit ModuleModel(Module& module);

  Module& module() { return module_; }

  DeviceOps& ops() override { return HostOps::instance(); }
  std::vector<ParameterInfo> parameter_info() override;
  TensorView parameter(size_t i) override;
  void use_grad_storage(size_t i, float* storage) override;
  void use_own_grad_storage(size_t i) noexcept override;
  void set_grad_ready_hook(size_t i, Hook hook) override;
  void forward(const Tensor& input, Tensor& output) override;
  void backward(const Tensor& input, const Tensor& output, const Tensor& grad_output) override;

 private:
  Module& module_;
  std::vector<std::pair<std::string, Parameter*>> params_;
};

}  // namespace collie::nn
