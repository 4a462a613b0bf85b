// ElasticMembership while a round runs: heartbeats, the checks that end a
// round, its end, the end of the job, and what the launcher says about them.
#include <algorithm>

#include "collie/base/str_cat.h"
#include "collie/rendezvous/env/cluster_env.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/runtime/launcher/elastic_membership.h"

namespace collie::launcher {
namespace {

using SteadyClock = std::chrono::steady_clock;

// How long the store host waits for the others to leave before it stops.
constexpr std::chrono::seconds kExitWait{30};

}  // namespace

void ElasticMembership::heartbeat() {
  const auto now = SteadyClock::now();
  if (now - last_beat_ < options_.keep_alive_interval) return;
  last_beat_ = now;
  store_->add(round_key(current_->round, str_cat("hb/", current_->node_rank)), 1);
}

std::optional<std::string> ElasticMembership::silent_member() {
  const auto now = SteadyClock::now();
  if (now - last_look_ < options_.keep_alive_interval) return std::nullopt;
  last_look_ = now;
  const auto limit = options_.keep_alive_interval * options_.keep_alive_max_attempt;
  for (int i = 0; i < current_->nnodes; ++i) {
    if (i == current_->node_rank) continue;
    const int64_t beats = store_->add(round_key(current_->round, str_cat("hb/", i)), 0);
    if (beats != seen_beats_[i]) {
      seen_beats_[i] = beats;
      seen_at_[i] = now;
    } else if (now - seen_at_[i] >= limit) {
      return str_cat(
          "node ", i, " (", current_->hosts[i], ") of round ", current_->round,
          " sent no heartbeat for ",
          format_duration(std::chrono::duration_cast<std::chrono::nanoseconds>(now - seen_at_[i])),
          " (--rdzv-conf keep_alive_interval x keep_alive_max_attempt = ", format_duration(limit),
          ")");
    }
  }
  return std::nullopt;
}

std::optional<RoundEnd> ElasticMembership::check() {
  const int round = current_->round;
  heartbeat();
  if (store_->check({round_key(round, "failed")}))
    return RoundEnd{.reason = to_string(store_->get(round_key(round, "failed")))};
  if (auto outcome = job_outcome())
    return RoundEnd{.reason = str_cat("the job is over: ", *outcome)};
  if (current_->nnodes < options_.max_nodes) {
    const int64_t waiting = store_->add(round_key(round + 1, "joined"), 0);
    if (waiting > 0)
      return RoundEnd{
          .reason = str_cat(waiting, " launcher", waiting == 1 ? " is" : "s are",
                            " waiting to join run '", options_.run_id, "' (round ", round, " has ",
                            current_->nnodes, " of at most ", options_.max_nodes, " nodes)"),
          .membership_change = true};
  }
  if (auto silent = silent_member()) {
    report_failure(*silent);
    return RoundEnd{.reason = *silent};
  }
  return std::nullopt;
}

std::optional<std::string> ElasticMembership::membership_change() {
  const int round = current_->round;
  if (current_->nnodes < options_.max_nodes && !store_->check({round_key(round, "failed")}) &&
      store_->add(round_key(round + 1, "joined"), 0) > 0)
    return std::string(
        "a launcher is waiting to join (this node's workers lost peers that another node "
        "stopped for it)");
  return std::nullopt;
}

void ElasticMembership::report_failure(const std::string& reason) {
  if (!current_) return;
  store_->compare_set(round_key(current_->round, "failed"), {}, as_span(reason));
}

std::optional<std::string> ElasticMembership::finish(bool succeeded) {
  if (!succeeded) return std::nullopt;
  return finish_round();
}

std::optional<std::string> ElasticMembership::finish_round() {
  const int round = current_->round;
  const int64_t done = store_->add(round_key(round, "done"), 1);
  Pause pause;
  for (int64_t n = done; n < current_->nnodes; n = store_->add(round_key(round, "done"), 0)) {
    check_interrupt(str_cat("waiting for the other nodes of round ", round, " to finish"));
    heartbeat();
    if (store_->check({round_key(round, "failed")}))
      return to_string(store_->get(round_key(round, "failed")));
    if (auto silent = silent_member()) {
      report_failure(*silent);
      return silent;
    }
    pause();
  }
  return std::nullopt;
}

void ElasticMembership::close(const std::string& outcome) {
  if (closed_) return;
  closed_ = true;
  if (current_) store_->set(round_key(current_->round, "over"), "1");
  store_->compare_set(key("job"), {}, as_span(outcome));
  const int members = current_ ? current_->nnodes : 1;
  const int64_t left = store_->add(key("exit"), 1);
  if (!server_) return;
  // The host keeps the store until the last round's members have left, so
  // that none of them loses it in its last call.
  const Deadline deadline(std::chrono::duration_cast<Timeout>(kExitWait));
  Pause pause;
  for (int64_t n = left; n < members && !deadline.expired(); n = store_->add(key("exit"), 0))
    pause();
  server_->stop();
}

std::string ElasticMembership::hosting_line() const {
  if (!server_) return "";
  return str_cat("collie-run: rendezvous store listening on ", endpoint(), " (run id '",
                 options_.run_id, "', --nnodes ", options_.min_nodes, ":", options_.max_nodes, ")");
}

std::string ElasticMembership::round_line() const {
  const Membership& r = *current_;
  return str_cat("collie-run: round ", r.round, " of run '", options_.run_id, "': node ",
                 r.node_rank, " of ", r.nnodes, " (", join(r.hosts, ", "), "), ranks ", r.rank_base,
                 "-", r.rank_base + options_.nproc - 1, " of world size ", r.world_size);
}

std::string ElasticMembership::store_lost_line() const {
  return str_cat("collie-run on ", options_.hostname, " gives up: the rendezvous store at ",
                 endpoint(),
                 " is gone (the launcher hosting it stopped); as with torchrun's c10d backend, "
                 "the job cannot go on without it");
}

std::string ElasticMembership::failed_elsewhere_line(const std::string& reason) const {
  return str_cat("collie-run: this node's workers succeeded, but round ", current_->round,
                 " failed elsewhere: ", reason);
}

}  // namespace collie::launcher
