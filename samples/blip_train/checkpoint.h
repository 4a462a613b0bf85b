// Checkpoints of the training sample: model, optimizer, epoch and the run's
// configuration in one StateDict file, written atomically (a temporary file
// in the same directory, fsync, rename, fsync of the directory), so that a
// crash while saving leaves the previous checkpoint intact and never a
// half-written one.
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
