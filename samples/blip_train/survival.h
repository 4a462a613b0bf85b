// --survive-failures: what blip_train needs to go on after a rank dies.
//
// When a collective fails (a peer was SIGKILLed, its sockets reset), the
// survivors call recover(): shrink_group (they agree through the store on
// who failed), move DDP to the new group, agree on how far training got
// (the furthest survivor leads: nn::agree_on_progress) and take its model
// and optimizer state (nn::broadcast_training_state), so every survivor is
// bit-identical. The trainer then reshards the rest of the epoch
// (nn::EpochPlan::reshard): a step nobody completed is redone, a step that
// somebody completed is not.
//
// SampleCounts proves the "exactly once": per dataset index, how often a
// step that counts trained on it this epoch, whichever rank took it, the
// dead ones included (their share of the steps that completed is known from
// the plan, since every rank holds the whole epoch order).
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collie/nn/adamw.h"
#include "collie/nn/data_loader.h"
#include "collie/nn/ddp.h"
#include "collie/nn/device_ops.h"
#include "collie/nn/epoch_plan.h"
#include "collie/nn/sequential.h"
#include "collie/runtime/process_group/process_group.h"
#include "collie/samples/blip_train/train_model.h"

namespace collie::samples {

// COLLIE_REPLACEMENT=1: collie-run --on-failure replace started this process
// in a dead worker's slot (init_process_group joins the running group).
bool started_as_replacement();

// A failure of the group (a dead or unreachable peer, a timeout, a group
// broken or revoked by such a failure), which shrinking can get past; not a
// bug such as a mismatched call.
bool is_group_failure(const std::exception& e);

// Progress as one number that orders (epoch, positions of the epoch
// consumed): what the survivors compare.
int64_t encode_progress(int epoch, size_t consumed);
int decode_epoch(int64_t progress);
size_t decode_consumed(int64_t progress);

class SampleCounts {
 public:
  explicit SampleCounts(size_t dataset_len) : agreed_(dataset_len), mine_(dataset_len) {}
  void reset();
  // A batch this rank trained on in a step that completed.
  void add_mine(const std::vector<int64_t>& indices);
  // A batch every survivor adds alike (a dead rank's).
  void add_agreed(const std::vector<int64_t>& indices);
  // Folds every survivor's own counts into the agreed ones (collective),
  // so that a rank that dies later does not take them with it.
  void consolidate(ProcessGroup& group, nn::DeviceOps& device);
  // The same once the group grew (collective on the grown group): rank 0
  // adds the agreed counts, a joiner (holding none) adds nothing, and every
  // rank, the joiner too, ends with the job's counts so far as agreed ones.
  void admit(ProcessGroup& group, nn::DeviceOps& device);
  struct Summary {
    int64_t trained = 0, distinct = 0, missing = 0, repeated = 0;
  };
  // The whole job's counts (collective; changes nothing here).
  Summary summarize(ProcessGroup& group, nn::DeviceOps& device) const;

 private:
  std::vector<double> agreed_, mine_;
};

struct Recovery {
  int old_world = 0, old_rank = 0, new_world = 0, new_rank = 0;
  std::vector<int> excluded;  // old ranks
  int64_t progress = 0;       // the leader's
  int leader = 0;             // new rank
  size_t state_bytes = 0;
  std::chrono::steady_clock::duration took{};
};

// Where a survivor goes on once the survivors agreed (r.progress, the
// leader's): in the same epoch, the rest of `plan` after the steps the
// leader completed, resharded over the new world; or, when the leader was
// already in a later epoch (it passed this epoch's barrier, so every rank's
// training and end were done, and it failed in that epoch's first step),
// the leader's own plan of that epoch in the world `plan` was made for
// (the leader's world when it started that epoch), resharded alike.
// Every survivor gets the same steps. Throws Error when the agreement is
// impossible (survivors more than a step apart).
struct ResumePoint {
  int epoch = 0;
  nn::EpochPlan plan;
  size_t completed = 0;     // steps of `plan` (the old one) that count
  bool next_epoch = false;  // the leader was in a later epoch
};
ResumePoint resume_point(int epoch, const nn::EpochPlan& plan, size_t done, const Recovery& r,
                         size_t dataset_len, uint64_t seed);

// Shrinks the default group, moves `ddp` to it (`holder` keeps the group
// alive for DDP), agrees on progress and broadcasts the leader's state.
// `on_shrunk` runs once the new group is there, with the group fields
// filled (who was left out), before the agreement: what a caller must
// learn even when the rest fails (another rank dying) and it starts over.
Recovery recover(nn::DistributedDataParallel& ddp, std::shared_ptr<ProcessGroup>& holder,
                 nn::Sequential& model, nn::AdamW& optimizer, int64_t my_progress, Timeout timeout,
                 const std::function<void(const Recovery&)>& on_shrunk = {});

// What an epoch's evaluation and training gave (log.txt's numbers).
struct EvalStats {
  double acc = 0, loss = 0;
  int64_t count = 0;
};
struct TrainStats {
  double loss = 0, lr = 0, samples_per_s = 0;
};

struct SurvivalOptions {
  int epochs = 10;
  size_t batch_size = 64;  // per rank
  uint64_t seed = 0;
  double lr = 1e-3, min_lr = 0;
  int print_freq = 50;
  Timeout timeout = kUnsetTimeout;
  // --kill-self-at (tests): the rank (as launched) that SIGKILLs itself, in
  // which epoch, before which step (-1: before the epoch's end, -2: in its
  // first recovery, once the group has shrunk).
  int launch_rank = 0, kill_rank = -1, kill_epoch = -1;
  int64_t kill_step = -1;
  // A replacement (COLLIE_REPLACEMENT=1, --join): it was admitted into the
  // running group and takes the hand-over before its first step.
  bool joiner = false;
};

// What train_surviving works on (the pieces blip_train's run() made).
struct SurvivalContext {
  SurvivalOptions options;
  // Remade on the grown group when a replacement joins.
  std::unique_ptr<nn::DistributedDataParallel>& ddp;
  std::shared_ptr<ProcessGroup>& group;  // the group DDP runs on, kept alive
  TrainModel& train_model;
  nn::Sequential& model;
  nn::AdamW& optimizer;
  const nn::Dataset& train_data;
  // The epoch's evaluation on `group` (every rank calls it; the main
  // process's result is the one that counts).
  std::function<EvalStats(ProcessGroup& group)> evaluate;
  // The main process's log line and checkpoints, once per epoch.
  std::function<void(int epoch, const TrainStats&, const EvalStats&, int world)> log_epoch;
};

// --survive-failures: the epochs from `start_epoch`, each a plan of steps
// over the epoch's global order (nn/epoch_plan.h). A failed collective
// anywhere in an epoch (a step's all_reduce, the statistics, the barrier)
// shrinks the group to the survivors, who take the furthest one's state and
// reshard what is left of the epoch. Before every step the members admit
// waiting replacements (admit_joiners): they hand them the state and
// everyone trains the rest of the epoch in the grown world
// (nn::EpochPlan::rest_from). Prints per epoch how often its samples were
// trained on. Returns the last evaluation.
// A replacement joining at a step boundary (runtime/api's admit_joiners has
// replaced the default group by a bigger one): both sides of the hand-over,
// collective on the grown group. A member (my_progress >= 0) wraps the
// model in a new DDP on it (as the joiner's DDP was made there: its
// construction checks the parameter shapes on every rank, collectively;
// `c.group` keeps the group alive); then nn::agree_on_progress, where the
// joiner states -1 and the members their (equal) progress, and
// nn::broadcast_training_state from rank 0: the joiner ends with rank 0's
// model, optimizer state and progress (epoch and position), from which it
// makes the members' plan.
struct Admission {
  int old_world = 0, new_world = 0, new_rank = 0;
  int64_t progress = 0;  // the members'
  size_t state_bytes = 0;
  std::chrono::steady_clock::duration took{};
};
Admission hand_over(SurvivalContext& c, int64_t my_progress);

EvalStats train_surviving(SurvivalContext& c, int start_epoch);

}  // namespace collie::samples

namespace collie::samples {
// FNV-1a-64 of the serialized model and optimizer state: equal on two ranks
// exactly when their replicas are bit-identical.
uint64_t state_checksum(nn::Sequential& model, nn::AdamW& optimizer);
}  // namespace collie::samples
