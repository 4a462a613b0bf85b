// Checkpoints of the training sample: model, optimizer, epoch and the run's
// configuration in one safetensors file (nn/state_dict.h), written
// atomically (a temporary file in the same directory, fsync, rename, fsync
// of the directory), so that a crash while saving leaves the previous
// checkpoint intact and never a half-written one.
//
// The file, as PyTorch's safetensors.torch.load_file sees it:
//   "1.weight", "1.bias", "3.weight", ...   the model: the state_dict keys and
//       shapes of the equivalent torch.nn.Sequential(nn.Flatten(),
//       nn.Linear(784, 256), nn.ReLU(), ...), so model.load_state_dict takes
//       them once the optimizer's tensors are left out
//   "optimizer.lr", "optimizer.state.<k>.step", ".exp_avg", ".exp_avg_sq"
//       AdamW's state for parameter k (0-d tensors for lr and step)
//   __metadata__ "epoch", "best_acc" (decimal text), "config" (config.json's
//       text), "format": "pt"
// Checkpoints of the earlier format (keys "model.1.weight", ..., and "epoch",
// "best_acc", "config" entries; nn/state_dict_legacy.h) still load, so older
// runs resume.
#pragma once

#include <string>

#include "collie/nn/module.h"
#include "collie/nn/optimizer.h"

namespace collie::samples {

struct CheckpointInfo {
  int64_t epoch = -1;  // the last finished epoch
  double best_acc = 0.0;
  std::string config_json;
};

void save_checkpoint(const std::string& path, nn::Module& model, const nn::Optimizer& optimizer,
                     const CheckpointInfo& info);
// Loads into model and optimizer (shapes checked); errors name the file.
CheckpointInfo load_checkpoint(const std::string& path, nn::Module& model,
                               nn::Optimizer& optimizer);

}  // namespace collie::samples
