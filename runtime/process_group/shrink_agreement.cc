#include "collie/runtime/process_group/shrink_agreement.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"

namespace collie {
namespace {

std::string encode(const std::vector<int>& ranks) { return join(ranks, ","); }

// "3,5" -> {3, 5}; anything else in a value another rank wrote is a
// corrupted store, reported as such.
std::vector<int> decode(std::string_view text, const std::string& key) {
  std::vector<int> out;
  while (!text.empty()) {
    const size_t comma = std::min(text.find(','), text.size());
    int v = -1;
    auto [end, ec] = std::from_chars(text.data(), text.data() + comma, v);
    if (ec != std::errc() || end != text.data() + comma)
      throw BackendError(str_cat("shrink: the store's value under \"", key,
                                 "\" is not a list of ranks: \"", text, "\""));
    out.push_back(v);
    text.remove_prefix(std::min(comma + 1, text.size()));
  }
  return out;
}

// The agreement over one store. A store that cannot be reached ends it at
// once: without the store the survivors cannot agree, and guessing would
// split the group.
class Agreement {
 public:
  Agreement(Store& store, std::string prefix, int rank, int size)
      : store_(store), prefix_(std::move(prefix)), rank_(rank), size_(size) {}

  ShrinkDecision run(const std::vector<int>& suspects, const Deadline& deadline,
                     const FindDead& find_dead) {
    const auto start = Clock::now();
    report(suspects);

    // Read the reports until every rank has reported or been reported, or
    // the deadline passes. A rank nobody accounts for is checked on after
    // kCheckAfter, then every second: a dead one is reported.
    auto next_check = Clock::now() + kCheckAfter;
    auto check_every = std::chrono::duration_cast<Clock::duration>(kCheckAfter);
    for (;;) {
      read_available();
      if (covered() || deadline.expired()) break;
      const auto now = Clock::now();
      if (find_dead && now >= next_check) {
        std::vector<int> dead =
            find_dead(unaccounted(), std::min(deadline.when(), now + kLivenessCheck));
        if (!dead.empty()) report(dead);
        check_every = std::min<Clock::duration>(check_every * 4, std::chrono::seconds(1));
        next_check = Clock::now() + check_every;
        continue;
      }
      // The next report: one whose place was taken is being written now
      // (or its writer died between the two: a gap, read past); otherwise
      // the next place to be taken.
      const bool gap = first_unread_ <= places_;
      auto until = std::min(deadline.when(), find_dead ? next_check : deadline.when());
      if (gap) until = std::min(until, now + kGapWait);
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now);
      try {
        store_.wait({order_key(gap ? first_unread_ : places_ + 1)},
                    std::max(left, std::chrono::milliseconds(1)));
      } catch (const TimeoutError&) {
        // The deadline, a check due, or a gap: the loop decides.
      }
    }
    // Whatever arrived meanwhile counts, so that a rank whose deadline is
    // spent still proposes from every report there is.
    read_available();

    // Propose; the first proposal in the store is the decision.
    std::vector<int> proposal;
    for (int r = 0; r < size_; ++r)
      if (suspected_.count(r) || !reported_.count(r)) proposal.push_back(r);
    const std::string decision_key = prefix_ + "decision";
    const std::string decided = to_string(
        store_.compare_set(decision_key, Bytes{}, to_bytes(str_cat("x", encode(proposal)))));
    if (decided.empty() || decided[0] != 'x')
      throw BackendError(str_cat("shrink: the store's value under \"", decision_key,
                                 "\" is not a decision: \"", decided, "\""));

    ShrinkDecision d;
    d.excluded = decode(std::string_view(decided).substr(1), decision_key);
    for (int r = 0; r < size_; ++r) {
      if (std::binary_search(d.excluded.begin(), d.excluded.end(), r)) {
        if (!suspected_.count(r) && !reported_.count(r)) d.silent.push_back(r);
        continue;
      }
      if (r == rank_) d.new_rank = static_cast<int>(d.survivors.size());
      d.survivors.push_back(r);
    }
    d.elapsed = Clock::now() - start;
    if (d.survivors.empty())
      throw BackendError(str_cat("shrink: the survivors' agreement excluded every rank of ", size_,
                                 " (", encode(d.excluded), "): no group is left"));
    if (d.new_rank < 0) throw BackendError(excluded_self(d));
    return d;
  }

 private:
  // How long the reports may leave a rank unaccounted for before this
  // rank checks whether it is dead: long enough for the survivors' own
  // reports to arrive on a loaded machine, short next to any timeout.
  static constexpr Timeout kCheckAfter{50};
  // A liveness check's longest wait (a cut link answers nothing), and how
  // long a place taken but not written is waited for before the reports
  // after it are read.
  static constexpr std::chrono::milliseconds kLivenessCheck{500}, kGapWait{20};

  std::string order_key(int64_t i) const { return str_cat(prefix_, "order/", i); }

  // Under this rank's place in the order of reports; a rank may report
  // more than once (what it found dead later).
  void report(const std::vector<int>& suspects) {
    const int64_t place = store_.add(prefix_ + "n", 1);
    store_.set(order_key(place), str_cat(rank_, ":", encode(suspects)));
  }

  // Reads every report whose place is taken and that is written, in
  // place order; places taken but not yet written are read later.
  void read_available() {
    places_ = store_.add(prefix_ + "n", 0);
    while (first_unread_ <= places_ && read_.count(first_unread_)) ++first_unread_;
    for (int64_t i = first_unread_; i <= places_; ++i) {
      if (read_.count(i)) continue;
      const std::string key = order_key(i);
      if (!store_.check({key})) continue;
      take_report(key, to_string(store_.get(key)));
      read_.insert(i);
    }
    while (first_unread_ <= places_ && read_.count(first_unread_)) ++first_unread_;
  }

  std::vector<int> unaccounted() const {
    std::vector<int> out;
    for (int r = 0; r < size_; ++r)
      if (!suspected_.count(r) && !reported_.count(r)) out.push_back(r);
    return out;
  }

  bool covered() const { return unaccounted().empty(); }

  void take_report(const std::string& key, const std::string& value) {
    const size_t colon = value.find(':');
    std::vector<int> who =
        decode(std::string_view(value).substr(0, std::min(colon, value.size())), key);
    if (colon == std::string::npos || who.size() != 1 || who[0] < 0 || who[0] >= size_)
      throw BackendError(str_cat("shrink: the store's value under \"", key,
                                 "\" is not a report: \"", value, "\""));
    reported_.insert(who[0]);
    // A rank an earlier report excluded has no say: two sides of a cut
    // network that both reach the store accuse each other, and the first
    // to report keeps the group, rather than the union excluding all.
    if (suspected_.count(who[0])) return;
    for (int s : decode(std::string_view(value).substr(colon + 1), key)) {
      if (s < 0 || s >= size_)
        throw BackendError(str_cat("shrink: rank ", who[0], " reported rank ", s,
                                   " failed, outside the group of ", size_));
      suspected_.insert(s);
      accusers_[s].push_back(who[0]);
    }
  }

  std::string excluded_self(const ShrinkDecision& d) const {
    auto it = accusers_.find(rank_);
    if (it != accusers_.end())
      return str_cat("shrink: rank ", rank_, " was left out of the shrunk group: rank",
                     it->second.size() == 1 ? " " : "s ", encode(it->second),
                     " reported it failed (the survivors' agreement excluded ranks ",
                     encode(d.excluded), ")");
    return str_cat("shrink: rank ", rank_,
                   " was left out of the shrunk group: the survivors decided before its report "
                   "was read, excluding ranks ",
                   encode(d.excluded), " (it reached shrink after the others' deadline)");
  }

  Store& store_;
  const std::string prefix_;
  const int rank_, size_;
  std::set<int> reported_, suspected_;
  std::set<int64_t> read_;                    // places read
  int64_t places_ = 0;                        // places taken, as last read
  int64_t first_unread_ = 1;                  // the lowest place not read
  std::map<int, std::vector<int>> accusers_;  // suspect -> who reported it
};

}  // namespace

ShrinkDecision agree_on_shrink(Store& store, const std::string& prefix, int rank, int size,
                               std::vector<int> suspects, uint64_t attempt,
                               const Deadline& deadline, const FindDead& find_dead) {
  if (rank < 0 || rank >= size)
    throw InvalidArgument(str_cat("shrink: rank ", rank, " is out of range for size ", size));
  std::sort(suspects.begin(), suspects.end());
  suspects.erase(std::unique(suspects.begin(), suspects.end()), suspects.end());
  for (int s : suspects) {
    if (s < 0 || s >= size)
      throw InvalidArgument(
          str_cat("shrink: rank ", s, " to exclude is out of range for a group of ", size));
  }
  Agreement agreement(store, str_cat(prefix, "shrink/", attempt, "/"), rank, size);
  try {
    ShrinkDecision d = agreement.run(suspects, deadline, find_dead);
    COLLIE_LOG(kInfo) << "shrink: rank " << rank << " of " << size << " agreed to exclude ["
                      << encode(d.excluded) << "] in " << format_duration(d.elapsed)
                      << "; it is rank " << d.new_rank << " of " << d.survivors.size();
    return d;
  } catch (const BackendError&) {
    throw;
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Error& e) {
    // NetworkError, StoreError, TimeoutError from the store itself.
    throw BackendError(str_cat(
        "shrink: rank ", rank, " cannot agree with the other survivors: the store is unreachable (",
        e.what(),
        "). Shrinking needs a store that outlives every worker: run under collie-run or torchrun "
        "(their agent hosts it), or host it with collie-store; with env:// or tcp:// rank 0 "
        "hosts it, and it died with rank 0"));
  }
}

}  // namespace collie
