// Membership: what the launcher's one loop (agent.h) asks of the launchers
// of a job: who is in each round, agreed through the job's store. torchrun
// calls this its rendezvous handler (hence --rdzv-backend); in collie
// "rendezvous" is the layer the store comes from (rendezvous/), and this is
// the launchers' membership built on it. Two implementations, as in torchrun:
//
//   StaticMembership   --rdzv-backend static: node ranks given, node 0 hosts
//                      the store, every attempt starts and ends on every
//                      node together (static_membership.h)
//   ElasticMembership  --rdzv-backend c10d: node ranks on arrival, a new
//                      round when a member fails, vanishes or a launcher
//                      waits to join (elastic_membership.h)
//
// A round is one run of this node's workers: the static membership calls it
// an attempt. The loop asks for the next round, runs the workers while it
// checks the round every ~200 ms, reports this node's failure, finishes the
// round with the other nodes, and closes the membership once the job is over
// for everyone.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "collie/base/error.h"

namespace collie::launcher {

// Thrown out of a membership wait when the launcher got a termination signal.
class MembershipInterrupted : public Error {
 public:
  MembershipInterrupted(int signal, const std::string& what) : Error(what), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

// Thrown by next_round() when the job is over before this launcher could
// join a round: it succeeded (the launcher exits 0) or another launcher gave
// up (exit 1).
class JobOver : public Error {
 public:
  JobOver(bool succeeded, const std::string& what) : Error(what), succeeded_(succeeded) {}
  bool succeeded() const { return succeeded_; }

 private:
  bool succeeded_;
};

// This node's place in one round.
struct Round {
  int number = 0;  // TORCHELASTIC_RESTART_COUNT, and the attempt_N log folder
  int node_rank = 0;
  int nnodes = 1;
  int rank_base = 0;  // global rank of local rank 0
  int world_size = 1;
  // The agent store as the workers reach it (MASTER_ADDR, MASTER_PORT).
  std::string master_addr;
  uint16_t master_port = 0;
  // Set by the agent loop, not the rendezvous: the --max-restarts earlier
  // rounds used, so that --on-failure replace knows how many are left.
  int restarts_used = 0;
};

// Why a round ends while this node's workers still run.
struct RoundEnd {
  std::string reason;
  // The members change (a launcher waits to join): a new round that does
  // not count against --max-restarts.
  bool membership_change = false;
};

// How the loop's messages name a round: torchrun's static agent speaks of
// attempts of the group, the c10d one of rounds of the membership.
struct RoundWords {
  const char* round;         // "attempt 0 failed (...)", "round 1 ends: ..."
  const char* failed_round;  // "job failed after 2 attempts" / "... 2 failed rounds"
  const char* again;         // "...; restarting the group, restart 1 of 3"
};

class Membership {
 public:
  virtual ~Membership() = default;

  // Every wait polls it (a signal number, or 0), so that Ctrl-C is not held
  // up by launchers that are slow to come.
  virtual void set_interrupt_check(std::function<int()> check) = 0;
  // Waits until this node's next round starts, joining the job on the first
  // call. Throws MembershipInterrupted, JobOver, InvalidArgument (launchers
  // started with flags that do not go together) or another Error (the store
  // is gone, a timeout naming who did not come).
  virtual Round next_round() = 0;
  // While the workers run: a reason to end the round, or nullopt. Throws
  // when the store is gone, which ends the round too.
  virtual std::optional<RoundEnd> check() = 0;
  // After this node's workers failed on their own: a reason that is not
  // their fault, when the members are changing under them (a member stopped
  // its workers for a launcher waiting to join). nullopt: a real failure.
  virtual std::optional<std::string> membership_change() = 0;
  // Records why this node ends the round (the first report wins).
  virtual void report_failure(const std::string& reason) = 0;
  // This node's workers are done: waits for the other nodes' where the
  // round needs it, and returns the failure recorded for the round, if any.
  virtual std::optional<std::string> finish(bool succeeded) = 0;
  // The job is over, for everyone: `outcome` is "succeeded" or "failed:
  // <reason>". The launcher hosting the store waits (briefly) for the others
  // to leave.
  virtual void close(const std::string& outcome) = 0;

  // What the launcher says, in the rendezvous' words. Each is one line
  // without its newline; "" when there is nothing to say.
  virtual RoundWords words() const = 0;
  // Once the store is up: where it listens, when this launcher hosts it.
  virtual std::string hosting_line() const = 0;
  // When a round starts.
  virtual std::string round_line() const = 0;
  // When the store went away during a round: the job cannot go on.
  virtual std::string store_lost_line() const = 0;
  // When this node's workers succeeded but the round failed elsewhere.
  virtual std::string failed_elsewhere_line(const std::string& reason) const = 0;
};

}  // namespace collie::launcher
