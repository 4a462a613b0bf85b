// PeerNumbering: how a Transport numbers its peers. Outside a sub-group the
// numbering is the world's (rank() is the world rank, peer p is world rank
// p); inside one (Transport::SubgroupScope, for the hierarchical algorithms)
// it is the sub-group's: rank() is this rank's index among the members,
// size() their count, and peer p is world rank members[p]. Every peer number
// the algorithms hand the Transport goes through world() once, on the hot
// path, so everything here is inline: one member load and a branch.
// Invariants: the members are world ranks and include this rank (at
// sub_rank_); a sub-group nests inside another by saving the numbering
// before it (save()) and restoring it when it closes (restore()). Touched by
// the transport's thread only.
#pragma once

#include <algorithm>
#include <span>
#include <utility>
#include <vector>

#include "collie/base/check.h"

namespace collie {

class PeerNumbering {
 public:
  PeerNumbering(int rank, int size) : rank_(rank), size_(size) {}

  // This rank and the group's size in the current numbering.
  int rank() const { return members_.empty() ? rank_ : sub_rank_; }
  int size() const { return members_.empty() ? size_ : static_cast<int>(members_.size()); }
  // This rank and the size of the world, in a sub-group too.
  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  // The world rank of `peer` in the current numbering.
  int world(int peer) const { return members_.empty() ? peer : members_[peer]; }
  bool in_subgroup() const { return !members_.empty(); }

  // The numbering a sub-group replaces, to restore when it closes.
  struct Saved {
    std::vector<int> members;
    int sub_rank;
  };
  Saved save() const { return Saved{members_, sub_rank_}; }
  void restore(Saved&& saved) {
    members_ = std::move(saved.members);
    sub_rank_ = saved.sub_rank;
  }
  // This rank's index in `members` (world ranks); fails a check when it is
  // not among them. Separate from enter() so that a caller can check before
  // it changes anything else (SubgroupScope restarts the counters between).
  int find_self(std::span<const int> members) const {
    const auto me = std::find(members.begin(), members.end(), rank_);
    COLLIE_CHECK(me != members.end(), "rank ", rank_, " is not in its sub-group");
    return static_cast<int>(me - members.begin());
  }
  // Numbers peers by `members` from now on; this rank is members[self]
  // (find_self()).
  void enter(std::span<const int> members, int self) {
    members_.assign(members.begin(), members.end());
    sub_rank_ = self;
  }

 private:
  const int rank_;
  const int size_;
  // The open sub-group's members (world ranks; empty: none) and this rank's
  // index among them.
  std::vector<int> members_;
  int sub_rank_ = -1;
};

}  // namespace collie
