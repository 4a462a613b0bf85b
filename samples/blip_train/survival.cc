#include "collie/samples/blip_train/survival.h"

#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <optional>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/nn/distributed_sampler.h"
#include "collie/nn/loss.h"
#include "collie/nn/recovery.h"
#include "collie/nn/state_dict.h"
#include "collie/runtime/api/distributed.h"
#include "collie/samples/blip_train/fashion_mnist.h"
#include "collie/samples/blip_train/metric_logger.h"

namespace collie::samples {

namespace {
constexpr int kConsumedBits = 40;
}

bool started_as_replacement() {
  const char* v = std::getenv("COLLIE_REPLACEMENT");
  return v != nullptr && std::string(v) == "1";
}

bool is_group_failure(const std::exception& e) {
  return dynamic_cast<const NetworkError*>(&e) != nullptr ||
         dynamic_cast<const TimeoutError*>(&e) != nullptr ||
         dynamic_cast<const BackendError*>(&e) != nullptr;
}

int64_t encode_progress(int epoch, size_t consumed) {
  return (static_cast<int64_t>(epoch) << kConsumedBits) | static_cast<int64_t>(consumed);
}
int decode_epoch(int64_t progress) { return static_cast<int>(progress >> kConsumedBits); }
size_t decode_consumed(int64_t progress) {
  return static_cast<size_t>(progress & ((int64_t(1) << kConsumedBits) - 1));
}

void SampleCounts::reset() {
  std::fill(agreed_.begin(), agreed_.end(), 0.0);
  std::fill(mine_.begin(), mine_.end(), 0.0);
}

void SampleCounts::add_mine(const std::vector<int64_t>& indices) {
  for (int64_t i : indices) mine_.at(static_cast<size_t>(i)) += 1;
}

void SampleCounts::add_agreed(const std::vector<int64_t>& indices) {
  for (int64_t i : indices) agreed_.at(static_cast<size_t>(i)) += 1;
}

void SampleCounts::consolidate(ProcessGroup& group, nn::DeviceOps& device) {
  all_reduce_values(group, device, mine_);
  for (size_t i = 0; i < agreed_.size(); ++i) agreed_[i] += mine_[i];
  std::fill(mine_.begin(), mine_.end(), 0.0);
}

void SampleCounts::admit(ProcessGroup& group, nn::DeviceOps& device) {
  // Every member's agreed counts are alike: rank 0 brings them once.
  if (group.rank() == 0)
    for (size_t i = 0; i < agreed_.size(); ++i) mine_[i] += agreed_[i];
  all_reduce_values(group, device, mine_);
  agreed_.swap(mine_);
  std::fill(mine_.begin(), mine_.end(), 0.0);
}

SampleCounts::Summary SampleCounts::summarize(ProcessGroup& group, nn::DeviceOps& device) const {
  std::vector<double> total = mine_;
  all_reduce_values(group, device, total);
  Summary s;
  for (size_t i = 0; i < total.size(); ++i) {
    const auto n = static_cast<int64_t>(total[i] + agreed_[i]);
    s.trained += n;
    if (n > 0) ++s.distinct;
    if (n == 0) ++s.missing;
    if (n > 1) s.repeated += n - 1;
  }
  return s;
}

ResumePoint resume_point(int epoch, const nn::EpochPlan& plan, size_t done, const Recovery& r,
                         size_t dataset_len, uint64_t seed) {
  const int agreed_epoch = decode_epoch(r.progress);
  const size_t agreed = decode_consumed(r.progress);
  if (agreed_epoch > epoch) {
    COLLIE_CHECK(agreed_epoch == epoch + 1 && agreed == 0, "the leader is ", agreed,
                 " samples into epoch ", agreed_epoch, " while this rank has not finished epoch ",
                 epoch);
    nn::DistributedSampler old(dataset_len, plan.num_replicas(), plan.rank(), /*shuffle=*/true,
                               seed);
    old.set_epoch(static_cast<uint64_t>(agreed_epoch));
    return {agreed_epoch, nn::EpochPlan(old, plan.batch_size()).reshard(0, r.new_world, r.new_rank),
            0, true};
  }
  COLLIE_CHECK(agreed_epoch == epoch, "the leader is in epoch ", agreed_epoch,
               ", behind this rank's ", epoch);
  const size_t completed = plan.steps_for(agreed);
  COLLIE_CHECK(completed >= done && completed <= done + 1, "the leader completed ", completed,
               " steps of this epoch's plan, this rank ", done,
               ": survivors cannot be more than one step apart");
  return {epoch, plan.reshard(completed, r.new_world, r.new_rank), completed, false};
}

Recovery recover(nn::DistributedDataParallel& ddp, std::shared_ptr<ProcessGroup>& holder,
                 nn::Sequential& model, nn::AdamW& optimizer, int64_t my_progress, Timeout timeout,
                 const std::function<void(const Recovery&)>& on_shrunk) {
  const auto start = std::chrono::steady_clock::now();
  Recovery r;
  r.old_world = get_world_size();
  r.old_rank = get_rank();
  shrink_group({}, {}, {.timeout = timeout}, &r.excluded);
  std::shared_ptr<ProcessGroup> group = get_default_group();
  // The old group (revoked) stays alive in `holder` until DDP has let go.
  ddp.set_process_group(*group);
  holder = group;
  r.new_world = group->size();
  r.new_rank = group->rank();
  setup_for_distributed(r.new_rank == 0);
  if (on_shrunk) on_shrunk(r);
  const nn::Agreement a = nn::agree_on_progress(*group, my_progress, timeout);
  r.progress = a.progress;
  r.leader = a.leader;
  r.state_bytes = nn::broadcast_training_state(*group, a.leader, model, optimizer, timeout);
  r.took = std::chrono::steady_clock::now() - start;
  return r;
}

Admission hand_over(SurvivalContext& c, int64_t my_progress) {
  const Timeout timeout = c.options.timeout;
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<ProcessGroup> group = get_default_group();
  if (my_progress >= 0) {
    // The old DDP goes before the old group it refers to.
    c.ddp.reset();
    c.ddp = std::make_unique<nn::DistributedDataParallel>(
        c.train_model.ddp_model(), *group, nn::DdpOptions{.broadcast_parameters = false});
  }
  c.group = group;
  Admission a;
  a.new_world = group->size();
  a.new_rank = group->rank();
  const nn::Agreement agreed = nn::agree_on_progress(*group, my_progress, timeout);
  for (int64_t p : agreed.progress_of) {
    if (p < 0) continue;
    COLLIE_CHECK(p == agreed.progress, "the members admitted a replacement at different points: ",
                 join(agreed.progress_of, ","));
    ++a.old_world;
  }
  COLLIE_CHECK(agreed.leader == 0 && a.old_world >= 1, "a replacement joined a group of ",
               a.old_world, " members whose rank 0 is not one: ", join(agreed.progress_of, ","));
  a.progress = agreed.progress;
  a.state_bytes = nn::broadcast_training_state(*group, 0, c.model, c.optimizer, timeout);
  a.took = std::chrono::steady_clock::now() - start;
  return a;
}

}  // namespace collie::samples

namespace collie::samples {
uint64_t state_checksum(nn::Sequential& model, nn::AdamW& optimizer) {
  nn::StateDict state;
  nn::save_module_state(model, state, "model.");
  optimizer.save_state(state, "optimizer.");
  uint64_t h = 14695981039346656037ull;
  for (uint8_t b : nn::serialize_state_dict(state)) {
    h ^= b;
    h *= 1099511628211ull;
  }
  return h;
}
}  // namespace collie::samples

namespace collie::samples {

// --survive-failures: the epochs, each a plan of steps over the epoch's
// global order (nn/epoch_plan.h). A failed collective anywhere in an epoch
// (a step's all_reduce, the statistics, the barrier) shrinks the group to
// the survivors, who take the furthest one's state and reshard what is left
// of the epoch (survival.h; docs/nn.md, "Surviving a failure"). Returns the
// last evaluation (the main process's).
EvalStats train_surviving(SurvivalContext& c, int start_epoch) {
  const SurvivalOptions& o = c.options;
  nn::DeviceOps& device = c.train_model.ddp_model().ops();
  SampleCounts counts(c.train_data.size());
  EvalStats test{};
  int last_logged = start_epoch - 1;  // by whichever rank was the main process
  // When the failure being recovered from happened; none while all is well.
  bool recovering = false;
  std::chrono::steady_clock::time_point error_at{};
  std::string recovery_note;
  // The plan a recovery made for the next epoch (a leader already in it).
  std::optional<nn::EpochPlan> carried;
  int epoch = start_epoch;
  // A joiner's counts start at the join point, on top of the agreed ones
  // it was handed: the first epoch must not reset them.
  bool keep_counts = false;
  if (o.joiner) {
    const Admission a = hand_over(c, -1);
    counts.admit(*c.group, device);
    epoch = decode_epoch(a.progress);
    const size_t consumed = decode_consumed(a.progress);
    // The epoch's order below real_size() is the same in any world.
    nn::DistributedSampler sampler(c.train_data.size(), a.new_world, a.new_rank,
                                   /*shuffle=*/true, o.seed);
    sampler.set_epoch(static_cast<uint64_t>(epoch));
    carried = nn::EpochPlan(sampler, o.batch_size).rest_from(consumed, a.new_world, a.new_rank);
    last_logged = epoch - 1;
    keep_counts = true;
    print(force,
          str_cat("joined: world ", a.old_world, " -> ", a.new_world, " as rank ", a.new_rank,
                  " at epoch ", epoch, " sample ", consumed, ", ", a.state_bytes,
                  " bytes of state in ",
                  std::chrono::duration_cast<std::chrono::milliseconds>(a.took).count(), " ms"));
  }
  while (epoch < o.epochs) {
    nn::DistributedSampler sampler(c.train_data.size(), get_world_size(), get_rank(),
                                   /*shuffle=*/true, o.seed);
    sampler.set_epoch(static_cast<uint64_t>(epoch));
    nn::cosine_lr_schedule(c.optimizer, epoch, o.epochs, o.lr, o.min_lr);
    nn::EpochPlan plan = carried ? *carried : nn::EpochPlan(sampler, o.batch_size);
    carried.reset();
    if (!keep_counts) counts.reset();
    keep_counts = false;
    MetricLogger logger;
    logger.meter("lr", 1, "{value:.6f}");
    logger.meter("loss", 50, "{median:.4f} ({global_avg:.4f})");
    int64_t samples = 0;
    const auto start = std::chrono::steady_clock::now();
    size_t done = 0;  // steps of `plan` completed
    bool jumped = false;
    nn::Tensor grad;
    for (;;) {
      constexpr size_t kNone = ~size_t(0);
      size_t in_flight = kNone;  // the step whose collective may fail
      std::vector<int64_t> pending;
      try {
        for (; done < plan.num_steps(); ++done) {
          // Replacements waiting to join are admitted before every step;
          // after a hand-over the members ask again, which is where the
          // joiner's first step asks.
          while (admit_joiners(o.timeout) > 0) {
            const size_t consumed = plan.consumed_after(done);
            try {
              const Admission a = hand_over(c, encode_progress(epoch, consumed));
              counts.admit(*c.group, device);
              plan = plan.rest_from(consumed, a.new_world, a.new_rank);
              done = 0;
              print(force,
                    str_cat("admitted: world ", a.old_world, " -> ", a.new_world, " at epoch ",
                            epoch, " sample ", consumed, ", ", a.state_bytes, " bytes of state in ",
                            std::chrono::duration_cast<std::chrono::milliseconds>(a.took).count(),
                            " ms"));
            } catch (const std::exception& e) {
              // The plan and the counts are half handed over: no recovery
              // can tell which shares completed.
              if (!is_group_failure(e)) throw;
              throw Error(str_cat("a rank failed while a replacement joined (epoch ", epoch,
                                  " sample ", consumed,
                                  "), which --survive-failures does not survive: ", e.what()));
            }
          }
          if (done >= plan.num_steps()) break;
          if (o.kill_rank == o.launch_rank && o.kill_epoch == epoch &&
              o.kill_step == static_cast<int64_t>(done))
            raise(SIGKILL);
          in_flight = done;
          pending = plan.batch(done);
          nn::Batch batch = nn::collate(c.train_data, pending);
          const nn::Tensor& logits = c.ddp->forward(batch.inputs);
          float loss = 0;
          if (pending.empty()) {
            // A share with no sample (a last step with fewer samples than
            // ranks): the step still runs everywhere, with zero gradients.
            grad.resize({0, kNumClasses});
          } else {
            loss = nn::cross_entropy(logits, batch.labels, &grad);
            const float weight = plan.batch_weight(done);
            if (weight != 1.0f) grad.vector() *= weight;
          }
          c.train_model.zero_grad();
          c.ddp->backward(grad);
          c.train_model.step();
          counts.add_mine(pending);
          in_flight = kNone;
          samples += static_cast<int64_t>(pending.size());
          if (!pending.empty()) logger.update("loss", loss);
          logger.update("lr", c.optimizer.lr());
          if (recovering) {
            const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - error_at);
            print(force, str_cat("recovered: ", recovery_note, "; ", ms.count(),
                                 " ms from the error to the next completed step"));
            recovering = false;
          }
          if ((done + 1) % static_cast<size_t>(std::max(1, o.print_freq)) == 0 ||
              done + 1 == plan.num_steps())
            print(str_cat("Train Epoch: [", epoch, "]  [", done + 1, "/", plan.num_steps(), "]  ",
                          logger.str()));
        }
        // The end of the epoch. Every collective here can fail too; then the
        // survivors redo this part (the main process logs an epoch once).
        if (o.kill_rank == o.launch_rank && o.kill_epoch == epoch && o.kill_step == -1)
          raise(SIGKILL);
        ProcessGroup& group = *c.group;
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        double throughput[1] = {static_cast<double>(samples) / seconds};
        all_reduce_values(group, device, throughput);
        MetricLogger synced = logger;
        synced.synchronize_between_processes(group, device);
        const SampleCounts::Summary s = counts.summarize(group, device);
        print(str_cat("epoch ", epoch, " samples: trained ", s.trained, " distinct ", s.distinct,
                      " of ", c.train_data.size(), " (missing ", s.missing, ", repeated ",
                      s.repeated, ") world ", group.size()));
        print(synced.global_avg_str());
        c.train_model.sync_to_host();
        test = c.evaluate(group);
        if (group.rank() == 0 && last_logged < epoch)
          c.log_epoch(epoch,
                      {synced.at("loss").global_avg(), synced.at("lr").global_avg(), throughput[0]},
                      test, group.size());
        last_logged = std::max(last_logged, epoch);
        if (recovering) {  // the failure was in this epoch's last step or its end
          const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now() - error_at);
          print(force, str_cat("recovered: ", recovery_note, "; ", ms.count(),
                               " ms from the error to the end of the epoch"));
          recovering = false;
        }
        barrier();
        break;
      } catch (const std::exception& e) {
        if (!is_group_failure(e)) throw;
        if (!recovering) error_at = std::chrono::steady_clock::now();
        recovering = true;
        print(force,
              str_cat("rank ", get_rank(), " of ", get_world_size(), ": epoch ", epoch, " ",
                      in_flight != kNone ? str_cat("step ", in_flight, " of ", plan.num_steps())
                                         : std::string("end"),
                      " failed: ", e.what(), "; shrinking the group to the survivors"));
        // The current group's members as ranks of `plan` (the dead ones'
        // shares are rebuilt from it), and the dead so far.
        std::vector<int> members(static_cast<size_t>(plan.num_replicas()));
        std::iota(members.begin(), members.end(), 0);
        std::vector<int> dead;
        bool next_epoch = false;
        // A failure during the recovery (another rank dying) starts it
        // again on what is left; the state is committed once the leader's
        // has arrived.
        for (int attempt = 1;; ++attempt) {
          try {
            const bool kill_now = o.kill_rank == o.launch_rank && o.kill_epoch == epoch &&
                                  o.kill_step == -2 && attempt == 1;
            const Recovery r = recover(
                *c.ddp, c.group, c.model, c.optimizer,
                encode_progress(epoch, plan.consumed_after(done)), o.timeout,
                [&](const Recovery& shrunk) {
                  std::vector<int> staying;
                  for (int j = 0; j < shrunk.old_world; ++j) {
                    const bool gone = std::find(shrunk.excluded.begin(), shrunk.excluded.end(),
                                                j) != shrunk.excluded.end();
                    (gone ? dead : staying).push_back(members.at(static_cast<size_t>(j)));
                  }
                  members = staying;
                  if (kill_now) raise(SIGKILL);
                });
            const ResumePoint next =
                resume_point(epoch, plan, done, r, c.train_data.size(), o.seed);
            recovery_note = str_cat(
                "world ", r.old_world, " -> ", r.new_world, " (lost rank(s) ",
                join(r.excluded, ","), "), rank ", r.old_rank, " -> ", r.new_rank,
                ", leader new rank ", r.leader, " at epoch ", next.epoch, " sample ",
                decode_consumed(r.progress), ", ", r.state_bytes, " bytes of state in ",
                std::chrono::duration_cast<std::chrono::milliseconds>(r.took).count(), " ms");
            print(force, str_cat("shrunk: ", recovery_note));
            if (next.next_epoch) {
              // Nothing of this epoch is left to count; the next one starts
              // with the leader's plan of it.
              counts.reset();
              epoch = next.epoch;
              next_epoch = true;
            } else {
              // My step in flight counts when the leader completed it: its
              // all_reduce summed my gradient.
              if (in_flight != kNone && in_flight < next.completed) counts.add_mine(pending);
              // The dead ranks' shares of the steps that completed.
              for (int d : dead)
                for (size_t k = 0; k < next.completed; ++k) counts.add_agreed(plan.batch_of(d, k));
            }
            // Committed: this rank now holds the leader's state at `next`.
            dead.clear();
            in_flight = kNone;
            plan = next.plan;
            done = 0;
            members.resize(static_cast<size_t>(plan.num_replicas()));
            std::iota(members.begin(), members.end(), 0);
            counts.consolidate(*c.group, device);
            break;
          } catch (const std::exception& again) {
            if (!is_group_failure(again) || attempt >= 3) throw;
            print(force, str_cat("rank ", get_rank(), " of ", get_world_size(),
                                 ": the recovery failed too: ", again.what(),
                                 "; shrinking the group again"));
          }
        }
        if (next_epoch) {
          carried = plan;
          jumped = true;
          break;
        }
      }
    }
    if (!jumped) ++epoch;
  }
  return test;
}

}  // namespace collie::samples
