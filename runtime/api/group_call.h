// What every torch.distributed-style function does with its `group=`
// argument (internal to the API layer): find the ProcessGroup, do nothing
// on a non-member rank, translate default-group ranks (torch's src/dst/peer
// arguments) into the group's own, and wait unless async_op.
#pragma once

#include <memory>

#include "collie/runtime/api/group.h"
#include "collie/runtime/process_group/process_group.h"
#include "collie/runtime/process_group/work.h"

namespace collie {

// The ProcessGroup `group` names; null on a rank that is not a member.
// Throws Error when the default group is not initialized (distributed.cc).
std::shared_ptr<ProcessGroup> resolve_group(const Group& group, const char* call);
// torch returns None on a non-member rank; collie returns a completed Work.
std::shared_ptr<Work> non_member_work(const char* call);
// Waits when !async_op (rethrowing the error); returns the Work.
std::shared_ptr<Work> finish(std::shared_ptr<Work> work, bool async_op);
// The group rank of default-group rank `global` (`what` names the argument
// in the error: "src", "dst", "peer"); kAnySource stays kAnySource.
int group_rank_of(const Group& group, int global, const char* call, const char* what);
// The default-group rank of `group`'s rank `rank` (-1 stays -1).
int global_rank_of(const Group& group, int rank);

}  // namespace collie
