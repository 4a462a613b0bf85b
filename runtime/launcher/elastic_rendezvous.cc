#include "runtime/launcher/elastic_rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <thread>

#include "base/backoff.h"
#include "base/str_cat.h"
#include "rendezvous/env/cluster_env.h"
#include "rendezvous/tcp_store/tcp_store.h"
#include "runtime/launcher/node_rendezvous.h"
#include "runtime/launcher/worker_stream.h"

namespace collie::launcher {
namespace {

using SteadyClock = std::chrono::steady_clock;

// How long the store host waits for the others to leave before it stops.
constexpr std::chrono::seconds kExitWait{30};

int64_t to_int(const Bytes& b) {
  int64_t v = 0;
  std::istringstream(to_string(b)) >> v;
  return v;
}

// Short naps between looks at the store, growing to 50 ms.
class Pause {
 public:
  void operator()() { std::this_thread::sleep_for(backoff_.next_pause()); }

 private:
  Backoff backoff_{{.initial = std::chrono::milliseconds(2), .max = std::chrono::milliseconds(50)}};
};

}  // namespace

std::string ElasticRendezvous::key(const std::string& k) const {
  return str_cat("/collie-run/", options_.run_id, "/elastic/", k);
}

std::string ElasticRendezvous::round_key(int round, const std::string& k) const {
  return key(str_cat("r", round, "/", k));
}

std::unique_ptr<ElasticRendezvous> ElasticRendezvous::start(const ElasticOptions& o) {
  std::unique_ptr<ElasticRendezvous> r(new ElasticRendezvous());
  r->options_ = o;
  r->port_ = o.endpoint_port;
  const std::string endpoint = str_cat(o.endpoint_host, ":", o.endpoint_port);
  if (o.is_host.value_or(true)) {
    // Only the machine that owns the endpoint's address can bind it, and on
    // one machine only the first launcher: that one hosts the store.
    try {
      r->server_ = TcpStoreServer::start({.host = o.endpoint_host, .port = o.endpoint_port});
    } catch (const Error& e) {
      if (o.is_host.value_or(false))
        throw NetworkError(str_cat("collie-run: cannot host the rendezvous store on ", endpoint,
                                   " (--rdzv-conf is_host=true): ", e.what()));
    }
  }
  const Deadline deadline(o.join_timeout);
  if (!r->server_)
    wait_until_resolvable(
        o.endpoint_host, deadline,
        str_cat("collie-run on ", o.hostname, " (--rdzv-endpoint ", endpoint, ")"),
        [](const std::string& line) { write_all(STDERR_FILENO, line + "\n"); });
  TcpStoreOptions store_options;
  store_options.timeout = deadline.remaining();
  try {
    r->store_ =
        std::shared_ptr<Store>(TcpStore::connect(o.endpoint_host, o.endpoint_port, store_options));
  } catch (const Error& e) {
    // Refused at once (a different secret) or after the whole wait: say which.
    const std::string when =
        deadline.expired() ? str_cat("within ", format_duration(o.join_timeout))
                           : str_cat("(refused after ", format_duration(deadline.elapsed()), ")");
    std::string hint;
    if (o.secret_source.starts_with("derived") &&
        std::string(e.what()).find("job secret") != std::string::npos)
      hint = str_cat(". This launcher's job secret was ", o.secret_source,
                     ": every launcher must spell --rdzv-endpoint and --rdzv-id exactly alike "
                     "(127.0.0.1:P and localhost:P derive different secrets), or share "
                     "COLLIE_JOB_SECRET / COLLIE_JOB_SECRET_FILE");
    throw NetworkError(str_cat("collie-run on ", o.hostname,
                               " could not reach the rendezvous store at ", endpoint, " ", when,
                               ": ", e.what(), hint));
  }
  r->store_->set_timeout(o.join_timeout);
  return r;
}

ElasticRendezvous::~ElasticRendezvous() {
  if (server_) server_->stop();
}

void ElasticRendezvous::check_config() {
  if (config_checked_) return;
  const auto& o = options_;
  const std::string mine =
      str_cat("nnodes=", o.min_nodes, ":", o.max_nodes, " max_restarts=", o.max_restarts);
  const Bytes first = store_->compare_set(key("config"), {}, as_span(mine));
  if (to_string(first) != mine)
    throw InvalidArgument(str_cat("collie-run on ", o.hostname, " was started with ", mine,
                                  " but another launcher of run '", o.run_id, "' with ",
                                  to_string(first),
                                  "; every launcher of a job needs the same --nnodes and "
                                  "--max-restarts"));
  config_checked_ = true;
}

void ElasticRendezvous::check_interrupt(const std::string& what) {
  if (int sig = interrupt_check_ ? interrupt_check_() : 0)
    throw RendezvousInterrupted(
        sig, str_cat("collie-run on ", options_.hostname, " was interrupted while ", what));
}

std::optional<std::string> ElasticRendezvous::job_outcome() {
  if (!store_->check({key("job")})) return std::nullopt;
  return to_string(store_->get(key("job")));
}

ElasticRound ElasticRendezvous::next_round() {
  const auto& o = options_;
  check_config();
  if (current_) {
    // Leaving a round lets the next one close (see previous_over()).
    store_->set(round_key(current_->round, "over"), "1");
    current_.reset();
  }
  const Deadline deadline(o.join_timeout);
  // The round everyone is at: never one this launcher has already been in.
  const Bytes seen = store_->compare_set(key("round"), {}, as_span(std::string("0")));
  int round = std::max<int>(next_round_, static_cast<int>(to_int(seen)));
  for (;;) {
    if (auto outcome = job_outcome())
      throw JobOver(*outcome == "succeeded",
                    str_cat("collie-run on ", o.hostname, ": run '", o.run_id, "' is over (",
                            *outcome, ") before this launcher could join it"));
    // Publish the round we are at (only ever forward).
    for (std::string cur = to_string(store_->get(key("round"))); std::stoi(cur) < round;) {
      const std::string want = std::to_string(round);
      cur = to_string(store_->compare_set(key("round"), as_span(cur), as_span(want)));
      if (cur == want) break;
    }
    const int slot = static_cast<int>(store_->add(round_key(round, "joined"), 1));
    store_->set(round_key(round, str_cat("node/", slot - 1)), str_cat(o.nproc, " ", o.hostname));
    std::optional<SteadyClock::time_point> quorum_at;  // when we saw MIN launchers
    PreviousRound previous;
    Pause pause;
    for (;;) {
      check_interrupt(str_cat("waiting for round ", round, " of run '", o.run_id, "' to close"));
      if (store_->check({round_key(round, "closed")})) {
        const int n = static_cast<int>(to_int(store_->get(round_key(round, "closed"))));
        if (slot <= n) {
          next_round_ = round + 1;
          current_ = read_round(round, n, slot);
          return *current_;
        }
        break;  // too late for this round: on to the next
      }
      if (auto outcome = job_outcome()) break;  // the outer loop says so
      const int joined = static_cast<int>(store_->add(round_key(round, "joined"), 0));
      int close_with = 0;
      if (!previous_over(round, previous)) {
        // Launchers waiting for a round whose members still run: they wait
        // for the members to come over, never form a round of their own.
      } else if (joined >= o.max_nodes) {
        close_with = o.max_nodes;
      } else if (joined >= o.min_nodes) {
        if (!quorum_at) quorum_at = SteadyClock::now();
        if (SteadyClock::now() - *quorum_at >= o.last_call_timeout) close_with = joined;
      }
      if (close_with > 0) {
        store_->compare_set(round_key(round, "closed"), {}, as_span(std::to_string(close_with)));
        continue;
      }
      if (deadline.expired()) {
        std::vector<std::string> who;
        for (int i = 0; i < joined; ++i)
          who.push_back(to_string(store_->get(round_key(round, str_cat("node/", i)))));
        throw TimeoutError(
            str_cat("collie-run on ", o.hostname, " waited ", format_duration(o.join_timeout),
                    " (--rdzv-timeout / --rdzv-conf join_timeout) for round ", round, " of run '",
                    o.run_id, "' to gather --nnodes ", o.min_nodes, ":", o.max_nodes, ", but only ",
                    joined, " launcher", joined == 1 ? "" : "s",
                    " joined (nproc and host: ", join(who, ", "), ")"));
      }
      pause();
    }
    ++round;
  }
}

bool ElasticRendezvous::previous_over(int round, PreviousRound& prev) {
  if (prev.over) return true;
  const int r = round - 1;
  if (r < 0 || !store_->check({round_key(r, "closed")}) || store_->check({round_key(r, "over")}))
    return prev.over = true;
  // The previous round's members may all be gone without a word (their
  // machines lost): then their heartbeats stand still, and the round is
  // over all the same.
  const auto now = SteadyClock::now();
  if (prev.beats.empty()) {
    const int n = static_cast<int>(to_int(store_->get(round_key(r, "closed"))));
    prev.beats.assign(n, -1);
    prev.changed = now;
  }
  if (now - prev.looked < options_.keep_alive_interval) return false;
  prev.looked = now;
  bool moved = false;
  for (size_t i = 0; i < prev.beats.size(); ++i) {
    const int64_t b = store_->add(round_key(r, str_cat("hb/", i)), 0);
    moved = moved || b != prev.beats[i];
    prev.beats[i] = b;
  }
  if (moved) prev.changed = now;
  if (now - prev.changed < options_.keep_alive_interval * options_.keep_alive_max_attempt)
    return false;
  store_->set(round_key(r, "over"), "1");
  return prev.over = true;
}

ElasticRound ElasticRendezvous::read_round(int round, int n, int slot) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(round_key(round, str_cat("node/", i)));
  const std::vector<Bytes> values = store_->multi_get(keys);
  ElasticRound r{
      .round = round, .node_rank = slot - 1, .nnodes = n, .rank_base = 0, .world_size = 0};
  for (int i = 0; i < n; ++i) {
    std::istringstream in(to_string(values[i]));
    int nproc = 0;
    std::string host;
    in >> nproc >> host;
    if (nproc <= 0)
      throw StoreError(str_cat("collie-run: the launcher in slot ", i, " of round ", round,
                               " registered a bad worker count '", to_string(values[i]), "'"));
    if (i < r.node_rank) r.rank_base += nproc;
    r.world_size += nproc;
    r.hosts.push_back(host);
  }
  seen_beats_.assign(n, -1);
  seen_at_.assign(n, SteadyClock::now());
  last_beat_ = last_look_ = SteadyClock::time_point{};
  return r;
}

void ElasticRendezvous::heartbeat() {
  const auto now = SteadyClock::now();
  if (now - last_beat_ < options_.keep_alive_interval) return;
  last_beat_ = now;
  store_->add(round_key(current_->round, str_cat("hb/", current_->node_rank)), 1);
}

std::optional<std::string> ElasticRendezvous::silent_member() {
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

std::optional<std::string> ElasticRendezvous::check_round(bool* membership_change) {
  const int round = current_->round;
  heartbeat();
  if (store_->check({round_key(round, "failed")}))
    return to_string(store_->get(round_key(round, "failed")));
  if (auto outcome = job_outcome()) return str_cat("the job is over: ", *outcome);
  if (current_->nnodes < options_.max_nodes) {
    const int64_t waiting = store_->add(round_key(round + 1, "joined"), 0);
    if (waiting > 0) {
      if (membership_change) *membership_change = true;
      return str_cat(waiting, " launcher", waiting == 1 ? " is" : "s are", " waiting to join run '",
                     options_.run_id, "' (round ", round, " has ", current_->nnodes, " of at most ",
                     options_.max_nodes, " nodes)");
    }
  }
  if (auto silent = silent_member()) {
    report_failure(*silent);
    return silent;
  }
  return std::nullopt;
}

bool ElasticRendezvous::newcomer_waiting() {
  const int round = current_->round;
  return current_->nnodes < options_.max_nodes && !store_->check({round_key(round, "failed")}) &&
         store_->add(round_key(round + 1, "joined"), 0) > 0;
}

void ElasticRendezvous::report_failure(const std::string& reason) {
  if (!current_) return;
  store_->compare_set(round_key(current_->round, "failed"), {}, as_span(reason));
}

std::optional<std::string> ElasticRendezvous::finish_round() {
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

void ElasticRendezvous::close(const std::string& outcome) {
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

}  // namespace collie::launcher
