#include "collie/runtime/launcher/elastic_membership.h"

#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <thread>

#include "collie/base/str_cat.h"
#include "collie/rendezvous/env/cluster_env.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/runtime/launcher/worker_stream.h"

namespace collie::launcher {
namespace {

using SteadyClock = std::chrono::steady_clock;

int64_t to_int(const Bytes& b) {
  int64_t v = 0;
  std::istringstream(to_string(b)) >> v;
  return v;
}

}  // namespace

void ElasticMembership::Pause::operator()() { std::this_thread::sleep_for(backoff_.next_pause()); }

std::string ElasticMembership::key(const std::string& k) const {
  return str_cat("/collie-run/", options_.run_id, "/elastic/", k);
}

std::string ElasticMembership::round_key(int round, const std::string& k) const {
  return key(str_cat("r", round, "/", k));
}

std::string ElasticMembership::endpoint() const {
  return str_cat(options_.endpoint_host, ":", options_.endpoint_port);
}

std::unique_ptr<ElasticMembership> ElasticMembership::start(const ElasticOptions& o) {
  std::unique_ptr<ElasticMembership> r(new ElasticMembership());
  r->options_ = o;
  const std::string endpoint = r->endpoint();
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

ElasticMembership::~ElasticMembership() {
  if (server_) server_->stop();
}

void ElasticMembership::check_config() {
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

void ElasticMembership::check_interrupt(const std::string& what) {
  if (int sig = interrupt_check_ ? interrupt_check_() : 0)
    throw MembershipInterrupted(
        sig, str_cat("collie-run on ", options_.hostname, " was interrupted while ", what));
}

std::optional<std::string> ElasticMembership::job_outcome() {
  if (!store_->check({key("job")})) return std::nullopt;
  return to_string(store_->get(key("job")));
}

Round ElasticMembership::next_round() {
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
  for (int round = std::max<int>(next_round_, static_cast<int>(to_int(seen)));; ++round) {
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
    if (!join_round(round, deadline)) continue;  // too late for it: on to the next
    return {.number = current_->round,
            .node_rank = current_->node_rank,
            .nnodes = current_->nnodes,
            .rank_base = current_->rank_base,
            .world_size = current_->world_size,
            .master_addr = o.endpoint_host,
            .master_port = o.endpoint_port};
  }
}

bool ElasticMembership::join_round(int round, const Deadline& deadline) {
  const auto& o = options_;
  const int slot = static_cast<int>(store_->add(round_key(round, "joined"), 1));
  store_->set(round_key(round, str_cat("node/", slot - 1)), str_cat(o.nproc, " ", o.hostname));
  std::optional<SteadyClock::time_point> quorum_at;  // when we saw MIN launchers
  PreviousRound previous;
  Pause pause;
  for (;;) {
    check_interrupt(str_cat("waiting for round ", round, " of run '", o.run_id, "' to close"));
    if (store_->check({round_key(round, "closed")})) {
      const int n = static_cast<int>(to_int(store_->get(round_key(round, "closed"))));
      if (slot > n) return false;
      next_round_ = round + 1;
      current_ = read_round(round, n, slot);
      return true;
    }
    if (job_outcome()) return false;  // next_round() says so
    const int joined = static_cast<int>(store_->add(round_key(round, "joined"), 0));
    if (const int n = closing_size(round, joined, previous, quorum_at)) {
      store_->compare_set(round_key(round, "closed"), {}, as_span(std::to_string(n)));
      continue;
    }
    if (deadline.expired()) too_few(round, joined);
    pause();
  }
}

int ElasticMembership::closing_size(int round, int joined, PreviousRound& previous,
                                    std::optional<SteadyClock::time_point>& quorum_at) {
  const auto& o = options_;
  // Launchers waiting for a round whose members still run: they wait for
  // the members to come over, never form a round of their own.
  if (!previous_over(round, previous)) return 0;
  if (joined >= o.max_nodes) return o.max_nodes;
  if (joined < o.min_nodes) return 0;
  if (!quorum_at) quorum_at = SteadyClock::now();
  return SteadyClock::now() - *quorum_at >= o.last_call_timeout ? joined : 0;
}

void ElasticMembership::too_few(int round, int joined) {
  const auto& o = options_;
  std::vector<std::string> who;
  for (int i = 0; i < joined; ++i)
    who.push_back(to_string(store_->get(round_key(round, str_cat("node/", i)))));
  throw TimeoutError(str_cat(
      "collie-run on ", o.hostname, " waited ", format_duration(o.join_timeout),
      " (--rdzv-timeout / --rdzv-conf join_timeout) for round ", round, " of run '", o.run_id,
      "' to gather --nnodes ", o.min_nodes, ":", o.max_nodes, ", but only ", joined, " launcher",
      joined == 1 ? "" : "s", " joined (nproc and host: ", join(who, ", "), ")"));
}

bool ElasticMembership::previous_over(int round, PreviousRound& prev) {
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

ElasticMembership::Membership ElasticMembership::read_round(int round, int n, int slot) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(round_key(round, str_cat("node/", i)));
  const std::vector<Bytes> values = store_->multi_get(keys);
  Membership r{.round = round, .node_rank = slot - 1, .nnodes = n, .rank_base = 0, .world_size = 0};
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

}  // namespace collie::launcher
