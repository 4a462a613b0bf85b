#include "collie/samples/blip_train/train_model.h"

namespace collie::samples {

namespace {

class CpuTrainModel final : public TrainModel {
 public:
  CpuTrainModel(nn::Sequential& model, nn::AdamW& optimizer)
      : model_(model), optimizer_(optimizer), ddp_model_(model) {}

  nn::DdpModel& ddp_model() override { return ddp_model_; }
  const nn::Tensor& forward(const nn::Tensor& input) override { return model_.forward(input); }
  void backward(const nn::Tensor& grad_logits) override { model_.backward(grad_logits); }
  void zero_grad() override { optimizer_.zero_grad(); }
  void step() override { optimizer_.step(); }
  void sync_to_host() override {}

 private:
  nn::Sequential& model_;
  nn::AdamW& optimizer_;
  nn::ModuleModel ddp_model_;
};

}  // namespace

std::unique_ptr<TrainModel> make_cpu_train_model(nn::Sequential& model, nn::AdamW& optimizer) {
  return std::make_unique<CpuTrainModel>(model, optimizer);
}

}  // namespace collie::samples
