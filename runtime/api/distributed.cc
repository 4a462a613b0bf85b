#include "runtime/api/distributed.h"

#include <algorithm>
#include <mutex>

#include "rendezvous/prefix_store.h"
#include "runtime/api/backend_registry.h"
#include "runtime/api/init_rendezvous.h"
#include "runtime/base/check.h"
#include "runtime/base/error.h"
#include "runtime/base/logging.h"
#include "runtime/base/str_cat.h"

namespace collie {
namespace {

// The process-wide state torch keeps in distributed_c10d's globals.
struct State {
  std::mutex mu;
  std::shared_ptr<ProcessGroup> default_group;
  std::shared_ptr<Store> default_store;  // "default_pg/" over the rendezvous store
  std::string backend;
  Timeout timeout = kDefaultTimeout;
  int group_count = 0;  // names groups "0" (default), "1", "2"... like torch
  std::vector<std::weak_ptr<ProcessGroup>> sub_groups;
};

State& state() {
  static State s;
  return s;
}

[[noreturn]] void throw_not_initialized(const char* call) {
  throw Error(str_cat(call,
                      ": the default process group has not been initialized; call "
                      "collie::init_process_group() first"));
}

std::shared_ptr<ProcessGroup> default_group_or_throw(const char* call) {
  auto& s = state();
  std::lock_guard lock(s.mu);
  if (!s.default_group) throw_not_initialized(call);
  return s.default_group;
}

// The ProcessGroup a collective on `group` runs on; null for a non-member.
std::shared_ptr<ProcessGroup> resolve(const Group& group, const char* call) {
  if (!group.is_member()) return nullptr;
  if (group.is_default()) return default_group_or_throw(call);
  COLLIE_ARG_CHECK(group.process_group() != nullptr, call, ": the group has no process group");
  return group.process_group();
}

// torch returns None on a non-member rank; collie returns a completed Work.
std::shared_ptr<Work> non_member_work(const char* call) {
  COLLIE_LOG(kDebug) << call << " on a group this rank is not a member of: nothing to do";
  auto work = std::make_shared<CompletionWork>(str_cat(call, " (not a member)"));
  work->mark_completed();
  return work;
}

std::shared_ptr<Work> finish(std::shared_ptr<Work> work, bool async_op) {
  if (!async_op) work->wait();
  return work;
}

}  // namespace

void init_process_group(const InitOptions& options) {
  auto& s = state();
  {
    std::lock_guard lock(s.mu);
    if (s.default_group)
      throw InvalidArgument(
          "init_process_group: the default process group is already initialized; call "
          "destroy_process_group() first");
  }
  std::string backend = resolve_backend_name(options.backend);
  auto known = registered_backends();
  if (std::find(known.begin(), known.end(), backend) == known.end())
    throw InvalidArgument(str_cat("init_process_group: unknown backend \"", options.backend,
                                  "\" (known: ", join(known, ", "), ", auto)"));
  // Fail before the rendezvous, not after a 30-minute wait for peers.
  if (std::string reason = backend_unavailable_reason(backend); !reason.empty())
    throw BackendError(
        str_cat("init_process_group: backend \"", backend, "\" cannot run here: ", reason));
  Timeout timeout = resolve_timeout(options.timeout);
  COLLIE_ARG_CHECK(timeout.count() >= 0, "init_process_group: negative timeout ", timeout.count(),
                   "ms");

  Rendezvous rdzv = open_rendezvous(options, timeout);
  set_log_rank(rdzv.rank);
  auto default_store = std::make_shared<PrefixStore>("default_pg", rdzv.store);
  BackendContext context{default_store, rdzv.rank, rdzv.world_size,
                         timeout,       "0",       options.transport};
  auto group = create_backend(backend, context);
  COLLIE_LOG(kInfo) << "initialized the default process group: backend " << backend << ", rank "
                    << rdzv.rank << " of " << rdzv.world_size << " (" << rdzv.source << ")";

  std::lock_guard lock(s.mu);
  if (s.default_group) {
    group->shutdown(Timeout(0));
    throw InvalidArgument("init_process_group: another thread initialized the default group first");
  }
  s.default_group = std::move(group);
  s.default_store = std::move(default_store);
  s.backend = backend;
  s.timeout = timeout;
  s.group_count = 1;
  s.sub_groups.clear();
}

bool is_available() { return true; }

bool is_initialized() {
  auto& s = state();
  std::lock_guard lock(s.mu);
  return s.default_group != nullptr;
}

bool is_dist_avail_and_initialized() { return is_available() && is_initialized(); }

int get_rank(const Group& group) {
  auto pg = resolve(group, "get_rank");
  return pg ? pg->rank() : -1;
}

int get_world_size(const Group& group) {
  auto pg = resolve(group, "get_world_size");
  return pg ? pg->size() : -1;
}

std::string get_backend(const Group& group) {
  auto pg = resolve(group, "get_backend");
  COLLIE_ARG_CHECK(pg != nullptr, "get_backend: this rank is not a member of the group");
  return pg->backend_name();
}

bool is_main_process() { return !is_initialized() || get_rank() == 0; }

std::shared_ptr<ProcessGroup> get_default_group() {
  return default_group_or_throw("get_default_group");
}

Group new_group(std::vector<int> ranks, Timeout timeout, const std::string& backend) {
  auto& s = state();
  std::shared_ptr<ProcessGroup> world;
  std::shared_ptr<Store> base_store;
  std::string group_name;
  std::string backend_name;
  {
    std::lock_guard lock(s.mu);
    if (!s.default_group) throw_not_initialized("new_group");
    world = s.default_group;
    base_store = s.default_store;
    // Every rank calls new_group in the same order, so the counter names the
    // same group on every rank, members or not (torch's _group_count).
    group_name = std::to_string(s.group_count++);
    backend_name = backend.empty() ? s.backend : resolve_backend_name(backend);
    timeout = resolve_timeout(timeout, s.timeout);
  }
  const int world_size = world->size();
  if (ranks.empty()) {
    for (int r = 0; r < world_size; ++r) ranks.push_back(r);
  }
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    COLLIE_ARG_CHECK(ranks[i] >= 0 && ranks[i] < world_size, "new_group: rank ", ranks[i],
                     " is not in the default group of ", world_size, " ranks");
    COLLIE_ARG_CHECK(i == 0 || ranks[i] != ranks[i - 1], "new_group: rank ", ranks[i],
                     " is listed twice in [", join(ranks, ", "), "]");
  }
  auto it = std::find(ranks.begin(), ranks.end(), world->rank());
  if (it == ranks.end()) return Group::non_member(std::move(ranks));

  const int group_rank = static_cast<int>(it - ranks.begin());
  auto store = std::make_shared<PrefixStore>(group_name, base_store);
  BackendContext context{store, group_rank, static_cast<int>(ranks.size()), timeout, group_name};
  auto pg = create_backend(backend_name, context);
  {
    std::lock_guard lock(s.mu);
    s.sub_groups.push_back(pg);
  }
  COLLIE_LOG(kInfo) << "new_group \"" << group_name << "\" of ranks [" << join(ranks, ", ")
                    << "]: this rank is " << group_rank;
  return Group(std::move(pg), std::move(ranks));
}

void destroy_process_group(const Group& group) {
  if (!group.is_member()) return;
  if (!group.is_default()) {
    if (group.process_group()) group.process_group()->shutdown();
    return;
  }
  auto& s = state();
  std::shared_ptr<ProcessGroup> world;
  std::vector<std::weak_ptr<ProcessGroup>> subs;
  {
    std::lock_guard lock(s.mu);
    if (!s.default_group) throw_not_initialized("destroy_process_group");
    world = std::move(s.default_group);
    subs = std::move(s.sub_groups);
    s.default_group.reset();
    s.default_store.reset();
    s.sub_groups.clear();
    s.group_count = 0;
  }
  for (auto& weak : subs)
    if (auto pg = weak.lock()) pg->shutdown();
  world->shutdown();
}

std::shared_ptr<Work> all_reduce(TensorView tensor, ReduceOp op, const Group& group,
                                 bool async_op) {
  auto pg = resolve(group, "all_reduce");
  if (!pg) return non_member_work("all_reduce");
  return finish(pg->all_reduce(tensor, {.op = op, .async_op = async_op}), async_op);
}

std::shared_ptr<Work> broadcast(TensorView tensor, int src, const Group& group, bool async_op) {
  auto pg = resolve(group, "broadcast");
  if (!pg) return non_member_work("broadcast");
  int root = src;
  const auto& ranks = group.global_ranks();
  if (!ranks.empty()) {
    auto it = std::find(ranks.begin(), ranks.end(), src);
    if (it == ranks.end())
      throw InvalidArgument(
          str_cat("broadcast: src rank ", src, " is not in the group [", join(ranks, ", "), "]"));
    root = static_cast<int>(it - ranks.begin());
  }
  return finish(pg->broadcast(tensor, {.root = root, .async_op = async_op}), async_op);
}

std::shared_ptr<Work> barrier(const Group& group, bool async_op) {
  auto pg = resolve(group, "barrier");
  if (!pg) return non_member_work("barrier");
  return finish(pg->barrier({.async_op = async_op}), async_op);
}

std::shared_ptr<Work> all_gather(TensorView output, TensorView input, const Group& group,
                                 bool async_op) {
  auto pg = resolve(group, "all_gather");
  if (!pg) return non_member_work("all_gather");
  return finish(pg->all_gather(output, input, {.async_op = async_op}), async_op);
}

std::shared_ptr<Work> reduce_scatter(TensorView output, TensorView input, ReduceOp op,
                                     const Group& group, bool async_op) {
  auto pg = resolve(group, "reduce_scatter");
  if (!pg) return non_member_work("reduce_scatter");
  return finish(pg->reduce_scatter(output, input, {.op = op, .async_op = async_op}), async_op);
}

}  // namespace collie
