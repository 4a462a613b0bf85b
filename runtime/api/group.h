// Group: what torch.distributed's `group=` argument names. A value type:
//
//   Group{}                  the default group (torch's group=None)
//   new_group({0, 2})        a sub-group; on ranks 1 and 3 a non-member
//   Group(my_process_group)  any ProcessGroup, its ranks numbered as its own
//
// A non-member group is what new_group returns on ranks outside the group
// (torch's GroupMember.NON_GROUP_MEMBER): collectives on it do nothing on
// that rank, get_rank() on it is -1.
#pragma once

#include <memory>
#include <vector>

#include "collie/runtime/process_group/process_group.h"

namespace collie {

class Group {
 public:
  // The default group.
  Group() = default;
  // A group this rank belongs to. `global_ranks[i]` is the default-group rank
  // of the group's rank i; empty when the group's ranks are its own (then
  // broadcast's src is taken as a group rank).
  Group(std::shared_ptr<ProcessGroup> process_group, std::vector<int> global_ranks = {})  // NOLINT
      : kind_(Kind::kMember),
        process_group_(std::move(process_group)),
        global_ranks_(std::move(global_ranks)) {}
  static Group non_member(std::vector<int> global_ranks) {
    Group g;
    g.kind_ = Kind::kNonMember;
    g.global_ranks_ = std::move(global_ranks);
    return g;
  }

  bool is_default() const { return kind_ == Kind::kDefault; }
  bool is_member() const { return kind_ != Kind::kNonMember; }
  // The explicit group's ProcessGroup; null for the default group (resolve
  // it with get_default_group()) and for a non-member.
  const std::shared_ptr<ProcessGroup>& process_group() const { return process_group_; }
  const std::vector<int>& global_ranks() const { return global_ranks_; }

 private:
  enum class Kind { kDefault, kMember, kNonMember };
  Kind kind_ = Kind::kDefault;
  std::shared_ptr<ProcessGroup> process_group_;
  std::vector<int> global_ranks_;
};

}  // namespace collie
