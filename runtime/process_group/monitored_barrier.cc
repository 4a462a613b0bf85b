#include "collie/runtime/process_group/monitored_barrier.h"

#include <vector>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie {
namespace {

std::string barrier_key(const std::string& prefix, uint64_t seq, const std::string& leaf) {
  return str_cat(prefix, "monitored_barrier/", seq, "/", leaf);
}

}  // namespace

void monitored_barrier(Store& store, const std::string& prefix, int rank, int size, uint64_t seq,
                       Timeout timeout, bool wait_all_ranks) {
  const Deadline deadline(timeout);
  const std::string done = barrier_key(prefix, seq, "done");
  if (rank != 0) {
    store.set(barrier_key(prefix, seq, std::to_string(rank)), "1");
    // Rank 0 may have entered the barrier up to `timeout` after this rank
    // and then waited its whole timeout: its verdict gets twice as long.
    const Deadline verdict_deadline(timeout * 2);
    try {
      store.wait({done}, verdict_deadline.remaining());
    } catch (const TimeoutError&) {
      throw TimeoutError(str_cat("monitored_barrier #", seq, " on rank ", rank,
                                 ": rank 0 gave no verdict ", verdict_deadline.describe(),
                                 " (rank 0 is behind, hung or dead)"));
    }
    const std::string verdict = to_string(store.get(done));
    if (verdict != "ok") throw TimeoutError(str_cat("rank ", rank, ": rank 0 reports: ", verdict));
    return;
  }
  std::vector<int> missing;
  for (int r = 1; r < size; ++r) {
    const std::string key = barrier_key(prefix, seq, std::to_string(r));
    bool arrived = false;
    if (missing.empty()) {
      try {
        store.wait({key}, deadline.remaining());
        arrived = true;
      } catch (const TimeoutError&) {
      }
    } else {
      arrived = store.check({key});  // the time is up: only who is there now
    }
    if (arrived) {
      store.delete_key(key);
      continue;
    }
    missing.push_back(r);
    if (!wait_all_ranks) break;
  }
  if (missing.empty()) {
    if (seq > 1) store.delete_key(barrier_key(prefix, seq - 1, "done"));
    store.set(done, "ok");
    return;
  }
  const std::string message =
      str_cat("monitored_barrier #", seq, " timed out on rank 0 ", deadline.describe(), ": ",
              missing.size() == 1 ? "rank " : "ranks ", join(missing, ", "), " did not arrive",
              wait_all_ranks ? ""
                             : " (the first missing; wait_all_ranks "
                               "names every one)");
  store.set(done, message);
  throw TimeoutError(message);
}

}  // namespace collie
