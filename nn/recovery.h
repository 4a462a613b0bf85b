// After a rank failed and the survivors shrank the group (runtime/api's
// shrink_group), they must agree on where training stands and carry on from
// one state. Survivors can disagree on whether the step in flight completed:
// a rank may finish the step's all_reduce (and its optimizer step) before
// the victim died while the others fail inside the same all_reduce. Two
// collectives on the survivors' group settle it:
//
//   Agreement a = agree_on_progress(group, my_progress);   // all_gather
//   broadcast_training_state(group, a.leader, model, optimizer);
//
// The furthest survivor (the lowest new rank among those with the most
// progress) leads; its parameters and optimizer state go to everyone, so all
// replicas are bit-identical again. Progress is whatever monotone count the
// trainer keeps (blip_train: epoch and epoch positions consumed,
// nn/epoch_plan.h); a step that nobody completed is then redone by
// everyone. See docs/nn.md, "Surviving a failure".
#pragma once

#include <cstdint>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/nn/module.h"
#include "collie/nn/optimizer.h"
#include "collie/runtime/process_group/process_group.h"

namespace collie::nn {

struct Agreement {
  int64_t progress = 0;              // the furthest rank's
  int leader = 0;                    // the lowest rank with that progress
  std::vector<int64_t> progress_of;  // every rank's, by rank
};

// Collective (one all_gather of an int64 on host memory).
Agreement agree_on_progress(ProcessGroup& group, int64_t progress, Timeout timeout = kUnsetTimeout);

// Collective: `root`'s module parameters and optimizer state (its
// state_dict, "model." and "optimizer." keys, serialized) replace every
// other rank's, in two broadcasts (the size, then the bytes) of host memory.
// Returns the bytes broadcast.
size_t broadcast_training_state(ProcessGroup& group, int root, Module& module, Optimizer& optimizer,
                                Timeout timeout = kUnsetTimeout);

}  // namespace collie::nn
