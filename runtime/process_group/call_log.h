// CallLog: which collectives a rank has issued and completed, as a record
// the other ranks can read from the store. A backend that cannot check every
// message's header (NCCL moves the data where collie never sees it) uses it
// to diagnose across ranks what the cpu backend's headers catch inline:
//
//  * a hang: when a collective times out, every rank's record says how far
//    it got, so the error names the ranks that never called the collective
//    (they are behind) instead of only "timed out";
//  * a mismatch: two ranks whose records hold different calls under the same
//    sequence number called different collectives; the checker names both.
//
// Recording a call (issue()) takes a lock and moves a string: well under a
// microsecond (docs/performance.md, "NCCL mismatch check"). Everything else
// runs on a backend's background thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace collie {

class CallLog {
 public:
  // Keeps the signatures of the last `window` calls.
  explicit CallLog(size_t window = 32) : window_(window) {}

  // Records the next collective (sequence numbers count from 1) with its
  // signature: what every rank must agree on, e.g.
  // "all_reduce(float32, 1024, sum)"; nothing rank-specific. Returns its
  // sequence number. Thread-safe.
  uint64_t issue(std::string signature);
  // Every call up to `seq` has completed (calls complete in order).
  void complete(uint64_t seq);
  uint64_t issued() const;
  uint64_t completed() const;
  // The signature of call `seq` while it is in the window, else "".
  std::string signature(uint64_t seq) const;

  // The record another rank reads: a few lines of text (see parse()).
  std::string record() const;
  // Whether anything was issued or completed since the last record().
  bool changed() const;

  struct Record {
    uint64_t issued = 0;
    uint64_t completed = 0;
    std::map<uint64_t, std::string> recent;  // seq -> signature
  };
  static std::optional<Record> parse(std::string_view text);

 private:
  const size_t window_;
  mutable std::mutex mu_;
  uint64_t issued_ = 0;
  uint64_t completed_ = 0;
  std::deque<std::string> recent_;  // signatures of calls issued_ - size() + 1 .. issued_
  mutable uint64_t recorded_issued_ = 0, recorded_completed_ = 0;
};

// The first sequence number both records hold with different signatures:
// {seq, a's signature, b's signature}.
struct CallMismatch {
  uint64_t seq;
  std::string a, b;
};
std::optional<CallMismatch> first_mismatch(const CallLog::Record& a, const CallLog::Record& b);

// The sentence a timeout message carries about the other ranks: for each
// rank (records[r], nullopt when it never published one) whether it never
// called collective `seq` (behind), is stuck in it too, or finished it.
std::string describe_progress(uint64_t seq, int self,
                              const std::vector<std::optional<CallLog::Record>>& records);

}  // namespace collie
