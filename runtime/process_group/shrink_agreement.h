// The survivors of a group agree, through its store, on which ranks to leave
// out when they shrink it (ULFM's agree, for a store every rank can reach).
//
// Ranks can disagree about who failed: rank 0 sees rank 1's connection close,
// while rank 2 only hears of it from rank 0's abort frame and knows no
// culprit. So each survivor reports what it saw, and the excluded set is the
// union of the reports plus every rank that did not report by the deadline;
// the report of a rank that an earlier report excluded is not counted (when
// the data network is cut but both sides reach the store, the side that
// reports first stays, instead of each side excluding the other).
// Keys, under `prefix` + "shrink/<attempt>/":
//  * "n": every reporter adds 1 and gets its place i in the order of reports;
//  * "order/<i>": "<rank>:<suspects>" (old ranks, comma-separated);
//  * "decision": the first rank to reach a proposal writes it with
//    compare_set, and every rank adopts whatever is there, so that all
//    survivors leave with the same answer even when their views differed.
// A rank reads the reports in order and stops as soon as every rank of the
// group has either reported or been reported: with a SIGKILLed rank whose
// neighbours saw its socket close, that is a few store round trips per
// survivor, not a timeout. A rank that nobody reports and that never reports
// itself is first checked on (`find_dead`, when given: a rank whose
// listener refuses a connection is dead, and this rank reports it in a
// second report of its own), then waited for until the deadline (stopped,
// or not calling shrink) and excluded. Every rank in the decision reported, and so did every rank
// whose report the decision contains: the new group is exactly the ranks
// that took part and that no participant saw fail.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/rendezvous/store.h"

namespace collie {

struct ShrinkDecision {
  std::vector<int> excluded;   // old ranks, ascending
  std::vector<int> survivors;  // old ranks, ascending: the new group's order
  int new_rank = -1;           // this rank's index in survivors
  // The old ranks that no report named and that never reported by the
  // deadline (a subset of excluded).
  std::vector<int> silent;
  // How long this rank took to reach the decision.
  std::chrono::nanoseconds elapsed{0};
};

// Collective among the group's live ranks (old rank `rank` of `size`), each
// passing the ranks it saw fail or wants left out (`suspects`); `attempt`
// numbers the shrinks of one group so that a retry uses fresh keys. Throws
// BackendError when this rank is itself excluded (naming who reported it,
// or that it reported after the deadline), when every rank would be, and,
// naming the store, when the store cannot be reached (it must outlive every
// worker: see docs/reliability.md). InvalidArgument for a suspect out of
// range.
// `find_dead(ranks, until)` returns those of `ranks` known dead by `until`.
using FindDead = std::function<std::vector<int>(const std::vector<int>&, Clock::time_point)>;
ShrinkDecision agree_on_shrink(Store& store, const std::string& prefix, int rank, int size,
                               std::vector<int> suspects, uint64_t attempt,
                               const Deadline& deadline, const FindDead& find_dead = {});

}  // namespace collie
