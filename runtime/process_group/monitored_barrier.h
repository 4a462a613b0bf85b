// torch's monitored_barrier, for every backend, through the group's store:
// the one channel that still works when a rank's data connections or its
// GPU are stuck, and that can name each rank that did not arrive.
//
// Barrier number `seq` of a group (every rank counts its own calls):
//  * every rank but 0 sets "<prefix>monitored_barrier/<seq>/<rank>" and
//    waits for rank 0's verdict under ".../<seq>/done", up to twice
//    `timeout` (rank 0 may come late and then wait its whole timeout);
//  * rank 0 waits for those keys, one rank after the other, within one
//    `timeout`. With wait_all_ranks it keeps looking after the first
//    missing rank, so that the error names every rank that did not arrive;
//    without, it names the first (torch's two behaviours).
//  * rank 0 writes "ok" or the error under ".../done"; the other ranks
//    rethrow the error as theirs (a TimeoutError naming the missing ranks).
// Rank 0 deletes the arrival keys it has seen and, once everyone arrived,
// the previous barrier's verdict (read by then), so the store does not grow.
#pragma once

#include <cstdint>
#include <string>

#include "collie/base/deadline.h"
#include "collie/rendezvous/store.h"

namespace collie {

// Throws TimeoutError naming the ranks that did not arrive (on rank 0, and
// as rank 0's verdict on the others), or that rank 0 never answered.
void monitored_barrier(Store& store, const std::string& prefix, int rank, int size, uint64_t seq,
                       Timeout timeout, bool wait_all_ranks);

}  // namespace collie
