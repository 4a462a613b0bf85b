#include "collie/samples/blip_train/checkpoint.h"

#include "collie/nn/state_dict.h"

namespace collie::samples {

void save_checkpoint(const std::string& path, nn::Module& model, const nn::Optimizer& optimizer,
                     const CheckpointInfo& info) {
  nn::StateDict dict;
  nn::save_module_state(model, dict, "model.");
  optimizer.save_state(dict, "optimizer.");
  dict.set_int("epoch", info.epoch);
  dict.set_double("best_acc", info.best_acc);
  dict.set_string("config", info.config_json);
  nn::save_state_dict(dict, path);  // atomic: tmp + fsync + rename
}

CheckpointInfo load_checkpoint(const std::string& path, nn::Module& model,
                               nn::Optimizer& optimizer) {
  nn::StateDict dict = nn::load_state_dict(path);
  nn::load_module_state(model, dict, "model.");
  optimizer.load_state(dict, "optimizer.");
  CheckpointInfo info;
  info.epoch = dict.get_int("epoch");
  info.best_acc = dict.get_double("best_acc");
  info.config_json = dict.get_string("config");
  return info;
}

}  // namespace collie::samples
