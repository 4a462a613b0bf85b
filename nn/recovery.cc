#include "collie/nn/recovery.h"

#include <algorithm>

#include "collie/base/check.h"
#include "collie/base/types.h"
#include "collie/nn/state_dict.h"

namespace collie::nn {

Agreement agree_on_progress(ProcessGroup& group, int64_t progress, Timeout timeout) {
  Agreement a;
  a.progress_of.assign(static_cast<size_t>(group.size()), 0);
  int64_t mine = progress;
  group
      .all_gather(view(a.progress_of.data(), a.progress_of.size()), view(&mine, 1),
                  {.timeout = timeout})
      ->wait();
  a.progress = *std::max_element(a.progress_of.begin(), a.progress_of.end());
  a.leader = static_cast<int>(std::find(a.progress_of.begin(), a.progress_of.end(), a.progress) -
                              a.progress_of.begin());
  return a;
}

size_t broadcast_training_state(ProcessGroup& group, int root, Module& module, Optimizer& optimizer,
                                Timeout timeout) {
  COLLIE_ARG_CHECK(root >= 0 && root < group.size(), "broadcast_training_state: root ", root,
                   " is outside the group of ", group.size());
  std::vector<uint8_t> bytes;
  if (group.rank() == root) {
    StateDict state;
    save_module_state(module, state, "model.");
    optimizer.save_state(state, "optimizer.");
    bytes = serialize_state_dict(state);
  }
  int64_t size = static_cast<int64_t>(bytes.size());
  group.broadcast(view(&size, 1), {.root = root, .timeout = timeout})->wait();
  bytes.resize(static_cast<size_t>(size));
  group.broadcast(view(bytes.data(), bytes.size()), {.root = root, .timeout = timeout})->wait();
  if (group.rank() != root) {
    const StateDict state = parse_state_dict(bytes, "the training state broadcast by the leader");
    load_module_state(module, state, "model.");
    optimizer.load_state(state, "optimizer.");
  }
  return bytes.size();
}

}  // namespace collie::nn
