// --device cuda: the MLP on one GPU (nn::cuda::CudaMlp) with AdamW on the
// device (nn::cuda::CudaAdamW). DDP wraps the CudaMlp itself, so gradients
// are averaged in device buckets over the nccl backend; the host Sequential
// and AdamW are brought up to date only for evaluation and checkpoints.
#include "collie/base/error.h"
#include "collie/nn/cuda/cuda_adamw.h"
#include "collie/nn/cuda/cuda_mlp.h"
#include "collie/nn/state_dict.h"
#include "collie/runtime/cuda/cuda_device.h"
#include "collie/samples/blip_train/train_model.h"

namespace collie::samples {

namespace {

class CudaTrainModel final : public TrainModel {
 public:
  CudaTrainModel(nn::Sequential& model, nn::AdamW& optimizer, const nn::AdamWOptions& options,
                 int device)
      : model_(model), optimizer_(optimizer), gpu_(model, device), gpu_optimizer_(gpu_, options) {
    // The optimizer's state as loaded (zeros and step 0 on a fresh start).
    nn::StateDict state;
    optimizer_.save_state(state, "optimizer.");
    gpu_optimizer_.load_state(state, "optimizer.");
  }

  nn::DdpModel& ddp_model() override { return gpu_; }
  const nn::Tensor& forward(const nn::Tensor& input) override {
    input_ = &input;
    gpu_.forward(input, logits_);
    return logits_;
  }
  void backward(const nn::Tensor& grad_logits) override {
    if (input_ == nullptr) throw InvalidArgument("TrainModel::backward before forward");
    gpu_.backward(*input_, logits_, grad_logits);
  }
  void zero_grad() override { gpu_.zero_grad(); }
  // The host optimizer holds the learning rate its schedule sets.
  void step() override {
    gpu_optimizer_.set_lr(optimizer_.lr());
    gpu_optimizer_.step();
  }
  void sync_to_host() override {
    gpu_.copy_parameters_to(model_);
    nn::StateDict state;
    gpu_optimizer_.set_lr(optimizer_.lr());
    gpu_optimizer_.save_state(state, "optimizer.");
    optimizer_.load_state(state, "optimizer.");
  }

 private:
  nn::Sequential& model_;
  nn::AdamW& optimizer_;
  nn::cuda::CudaMlp gpu_;
  nn::cuda::CudaAdamW gpu_optimizer_;
  const nn::Tensor* input_ = nullptr;
  nn::Tensor logits_;
};

}  // namespace

std::string cuda_unavailable_reason() {
  if (collie::cuda::device_count() > 0) return "";
  return "no CUDA device: " + collie::cuda::no_device_reason();
}

std::unique_ptr<TrainModel> make_cuda_train_model(nn::Sequential& model, nn::AdamW& optimizer,
                                                  const nn::AdamWOptions& options, int device) {
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) throw BackendError("--device cuda: " + why);
  return std::make_unique<CudaTrainModel>(model, optimizer, options,
                                          device % collie::cuda::device_count());
}

}  // namespace collie::samples
