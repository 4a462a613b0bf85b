// ElasticMembership: collie-run's dynamic rendezvous, torchrun's
// `--rdzv-backend c10d` semantics over one TcpStore.
//
//   collie-run --rdzv-backend c10d --rdzv-endpoint HOST:PORT --rdzv-id JOB
//              --nnodes MIN:MAX --max-restarts K ./train
//
// Every launcher first tries to bind the store on HOST:PORT itself; the one
// that can (the machine that owns HOST, and on one machine the first to
// come) hosts it, and every launcher, the host included, is a client. Node
// ranks are not given: they are the order of arrival in a round.
//
// A round R is a membership. Launchers join it by add(r<R>/joined, 1), whose
// result is their slot, and record "<nproc> <hostname>" under r<R>/node/<i>.
// Round R closes once round R-1 is over (a member left it to rendezvous
// again, or all its members went silent) and MAX launchers joined, or MIN
// have and --rdzv-conf last_call_timeout has passed since this launcher saw
// the MIN-th: the first launcher to decide writes compare_set(r<R>/closed, "",
// "<n>"), and the first n slots are the members (node rank = slot - 1). A
// launcher whose slot is beyond n came late and joins round R+1.
//
// While the workers of round R run, every member watches (check()):
//   - r<R>/failed: a member's workers failed (or it was stopped);
//   - r<R+1>/joined > 0 while R has fewer than MAX members: a launcher is
//     waiting to join (a node added, or one coming back);
//   - r<R>/hb/<i>: each member's heartbeat counter, bumped every
//     keep_alive_interval; one that stands still for keep_alive_max_attempt
//     intervals is a member that is gone (its machine, its network).
// Any of them ends the round: every member stops its workers and joins
// round R+1, which starts the workers again with the new world size and
// TORCHELASTIC_RESTART_COUNT = R+1 (workers' keys live under
// /worker/attempt_<R+1>). A round that ends by a failure counts against
// --max-restarts; one that ends because a launcher is waiting does not (as in
// torchrun).
//
// The job ends when every member's workers of one round succeeded
// (r<R>/done reaches n): "job" is set to "succeeded", and a launcher still
// waiting to join exits 0 saying the job finished without it. A launcher
// that runs out of restarts sets "job" to the failure, and every other
// launcher stops too. The store host stays up until every member has left
// (at most 30 s). Keys live under /collie-run/<run id>/elastic/.
//
// The store lives in one launcher: as with torchrun's c10d backend, if the
// host launcher dies the others cannot rendezvous again and fail, naming it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collie/base/backoff.h"
#include "collie/rendezvous/store.h"
#include "collie/runtime/launcher/membership.h"

namespace collie {
class TcpStoreServer;
}

namespace collie::launcher {

struct ElasticOptions {
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc = 1;
  std::string endpoint_host;
  uint16_t endpoint_port = 29400;
  std::string run_id = "none";
  int max_restarts = 0;
  std::string hostname;
  // join_timeout: how long a launcher waits for a round to close, and to
  // reach the store.
  std::chrono::milliseconds join_timeout = std::chrono::seconds(600);
  std::chrono::milliseconds last_call_timeout = std::chrono::seconds(30);
  std::chrono::milliseconds keep_alive_interval = std::chrono::seconds(5);
  int keep_alive_max_attempt = 3;
  // Unset: host the store if the endpoint can be bound here.
  std::optional<bool> is_host;
  // Where this launcher's job secret came from ("derived from --rdzv-endpoint
  // ..."), for an error that says why another launcher was refused.
  std::string secret_source;
};

class ElasticMembership : public Membership {
 public:
  // Hosts the store when this launcher can bind the endpoint (or is_host
  // says so), then connects to it. Throws NetworkError naming the endpoint
  // when it cannot be reached within the join timeout, TimeoutError when
  // its name never resolves.
  static std::unique_ptr<ElasticMembership> start(const ElasticOptions& options);
  ~ElasticMembership() override;

  bool hosts_store() const { return server_ != nullptr; }
  void set_interrupt_check(std::function<int()> check) override {
    interrupt_check_ = std::move(check);
  }

  // Leaves the current round, joins the next one and waits for it to
  // close. Throws JobOver, TimeoutError (fewer than MIN launchers within the
  // join timeout, naming who came), MembershipInterrupted, InvalidArgument
  // (launchers with other --nnodes / --max-restarts).
  Round next_round() override;
  // A failure reported by a member, the job being over, a launcher waiting
  // to join (a membership change) or a member gone silent; heartbeats too.
  std::optional<RoundEnd> check() override;
  // A launcher waits to join while no member has reported a failure: then
  // workers that failed here most likely failed because another member
  // stopped its workers for the newcomer, and the round ends as a
  // membership change, not a failure.
  std::optional<std::string> membership_change() override;
  void report_failure(const std::string& reason) override;
  // After a success here: waits for the other members' workers; nullopt
  // when every member succeeded, else the reason the round failed
  // elsewhere. After a failure here there is nothing to wait for.
  std::optional<std::string> finish(bool succeeded) override;
  void close(const std::string& outcome) override;

  RoundWords words() const override { return {"round", "failed round", "rendezvous again"}; }
  std::string hosting_line() const override;
  std::string round_line() const override;
  std::string store_lost_line() const override;
  std::string failed_elsewhere_line(const std::string& reason) const override;

 private:
  // This launcher's place in one closed round.
  struct Membership {
    int round = 0;
    int node_rank = 0;  // arrival order, 0-based
    int nnodes = 1;
    int rank_base = 0;  // global rank of local rank 0
    int world_size = 1;
    std::vector<std::string> hosts;  // of every member, by node rank
  };
  // What a launcher waiting for round R knows of round R-1's members.
  struct PreviousRound {
    bool over = false;
    std::vector<int64_t> beats;
    std::chrono::steady_clock::time_point changed{}, looked{};
  };

  // Short naps between looks at the store, growing to 50 ms.
  class Pause {
   public:
    void operator()();

   private:
    Backoff backoff_{
        {.initial = std::chrono::milliseconds(2), .max = std::chrono::milliseconds(50)}};
  };

  ElasticMembership() = default;
  std::string key(const std::string& k) const;
  std::string round_key(int round, const std::string& k) const;
  std::string endpoint() const;
  void check_config();
  void check_interrupt(const std::string& what);
  std::optional<std::string> job_outcome();
  // Joins round `round` and waits until it closes: true when this launcher
  // is a member, false when it came too late (or the job is over).
  bool join_round(int round, const Deadline& deadline);
  // How many launchers round `round` closes with now, 0 for not yet.
  int closing_size(int round, int joined, PreviousRound& previous,
                   std::optional<std::chrono::steady_clock::time_point>& quorum_at);
  [[noreturn]] void too_few(int round, int joined);
  Membership read_round(int round, int n, int slot);
  // Whether round R-1 is over: a member left it (r<R-1>/over), it never
  // closed, or its members' heartbeats stood still for keep_alive_interval x
  // keep_alive_max_attempt. Round R closes only then, so that launchers
  // waiting to join never form a round of their own while the members of the
  // previous one still run (or are on their way over).
  bool previous_over(int round, PreviousRound& prev);
  void heartbeat();
  std::optional<std::string> silent_member();
  std::optional<std::string> finish_round();

  ElasticOptions options_;
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<Store> store_;
  std::function<int()> interrupt_check_;
  bool config_checked_ = false;
  bool closed_ = false;

  // The current round, once closed.
  std::optional<Membership> current_;
  int next_round_ = 0;  // the lowest round this launcher may join next
  // Heartbeats: ours, and what we last saw of every member and when.
  std::chrono::steady_clock::time_point last_beat_{};
  std::chrono::steady_clock::time_point last_look_{};
  std::vector<int64_t> seen_beats_;
  std::vector<std::chrono::steady_clock::time_point> seen_at_;
};

}  // namespace collie::launcher
