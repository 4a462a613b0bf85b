#include "collie/runtime/api/distributed.h"

#include <algorithm>
#include <mutex>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/prefix_store.h"
#include "collie/runtime/api/backend_registry.h"
#include "collie/runtime/api/group_call.h"
#include "collie/runtime/api/init_rendezvous.h"
#include "collie/runtime/api/per_device_process_group.h"
#include "collie/runtime/process_group/flight_recorder.h"
#include "collie/runtime/process_group/timeline.h"

namespace collie {
namespace {

// The process-wide state torch keeps in distributed_c10d's globals.
struct State {
  std::mutex mu;
  std::shared_ptr<ProcessGroup> default_group;
  std::shared_ptr<Store> default_store;  // "default_pg/" over the rendezvous store
  std::string backend;
  std::string route_host;  // Rendezvous::store_host
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
  const BackendSpec spec = parse_backend_spec(options.backend);
  // Fail before the rendezvous, not after a 30-minute wait for peers.
  if (std::string reason = backend_spec_unavailable_reason(spec); !reason.empty())
    throw BackendError(str_cat("init_process_group: ", reason));
  Timeout timeout = resolve_timeout(options.timeout);
  COLLIE_ARG_CHECK(timeout.count() >= 0, "init_process_group: negative timeout ", timeout.count(),
                   "ms");

  Rendezvous rdzv = open_rendezvous(options, timeout);
  set_log_rank(rdzv.rank);
  auto default_store = std::make_shared<PrefixStore>("default_pg", rdzv.store);
  BackendContext context{default_store, rdzv.rank,         rdzv.world_size, timeout,
                         "0",           options.transport, rdzv.store_host};
  const bool join = options.join || process_env("COLLIE_REPLACEMENT").value_or("") == "1";
  context.group_desc = "default_pg";
  if (!join) FlightRecorder::get().set_global_rank(rdzv.rank);
  auto group = join ? join_process_group(spec, context) : create_process_group(spec, context);
  set_log_rank(group->rank());
  FlightRecorder::get().set_global_rank(group->rank());
  // A joiner names its sub-groups as the members do: their count of
  // new_group calls comes from rank 0 (admit_joiners sends it).
  int64_t group_count = 1;
  if (join) group->broadcast(view(&group_count, 1), {.root = 0, .async_op = false})->wait();
  COLLIE_LOG(kInfo) << "initialized the default process group: backend " << group->backend_name()
                    << ", rank " << group->rank() << " of " << group->size() << " ("
                    << (join ? "joined a running group, " : "") << rdzv.source << ")";

  // COLLIE_TRACE=FILE: the job's timeline (collective, as this call is);
  // destroy_process_group writes it. A joiner's job is already recording.
  if (auto trace = process_env("COLLIE_TRACE"); trace && !trace->empty() && !join)
    timeline::start(*trace, group->rank(), group->size(), default_store);

  std::lock_guard lock(s.mu);
  if (s.default_group) {
    group->shutdown(Timeout(0));
    throw InvalidArgument("init_process_group: another thread initialized the default group first");
  }
  s.default_group = std::move(group);
  s.default_store = std::move(default_store);
  s.backend = spec.text;
  s.route_host = rdzv.store_host;
  s.timeout = timeout;
  s.group_count = static_cast<int>(group_count);
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
  auto pg = resolve_group(group, "get_rank");
  return pg ? pg->rank() : -1;
}

int get_world_size(const Group& group) {
  auto pg = resolve_group(group, "get_world_size");
  return pg ? pg->size() : -1;
}

std::string get_backend(const Group& group) {
  auto pg = resolve_group(group, "get_backend");
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
  std::string group_name, route_host;
  BackendSpec spec;
  {
    std::lock_guard lock(s.mu);
    if (!s.default_group) throw_not_initialized("new_group");
    world = s.default_group;
    base_store = s.default_store;
    route_host = s.route_host;
    // Every rank calls new_group in the same order, so the counter names the
    // same group on every rank, members or not (torch's _group_count).
    group_name = std::to_string(s.group_count++);
    spec = parse_backend_spec(backend.empty() ? s.backend : backend);
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
  BackendContext context{store, group_rank, static_cast<int>(ranks.size()), timeout, group_name,
                         "",    route_host};
  context.global_ranks = ranks;
  auto pg = create_process_group(spec, context);
  {
    std::lock_guard lock(s.mu);
    s.sub_groups.push_back(pg);
  }
  COLLIE_LOG(kInfo) << "new_group \"" << group_name << "\" of ranks [" << join(ranks, ", ")
                    << "]: this rank is " << group_rank;
  return Group(std::move(pg), std::move(ranks));
}

int admit_joiners(Timeout timeout) {
  auto pg = default_group_or_throw("admit_joiners");
  auto* per_device = dynamic_cast<PerDeviceProcessGroup*>(pg.get());
  auto host = per_device ? per_device->backend(DeviceType::kCPU) : nullptr;
  auto* growable = dynamic_cast<Growable*>(host ? host.get() : pg.get());
  COLLIE_ARG_CHECK(growable != nullptr, "admit_joiners: the default group's backend (",
                   pg->backend_name(), ") cannot be joined");
  GrowResult grown = growable->grow(timeout);
  if (grown.joined == 0) return 0;
  auto& s = state();
  std::shared_ptr<ProcessGroup> group;
  int64_t group_count = 0;
  {
    std::lock_guard lock(s.mu);
    const BackendSpec spec = parse_backend_spec(s.backend);
    group = std::make_shared<PerDeviceProcessGroup>(
        grown.group->rank(), grown.group->size(), spec.text,
        PerDeviceProcessGroup::Slot{grown.group, ""},
        PerDeviceProcessGroup::Slot{nullptr, spec.cuda_why});
    if (s.default_group != pg)
      throw InvalidArgument("admit_joiners: the default group was replaced by another thread");
    s.default_group = group;
    group_count = s.group_count;
  }
  // The joiners' init_process_group takes rank 0's count of new_group
  // calls, so that the next new_group has one name everywhere.
  group->broadcast(view(&group_count, 1), {.root = 0, .async_op = false})->wait();
  return grown.joined;
}

Group shrink_group(std::vector<int> ranks_to_exclude, const Group& group,
                   const ShrinkOptions& options, std::vector<int>* excluded) {
  COLLIE_ARG_CHECK(group.is_member(), "shrink_group: this rank is not a member of the group");
  auto pg = resolve_group(group, "shrink_group");
  auto* shrinkable = dynamic_cast<Shrinkable*>(pg.get());
  COLLIE_ARG_CHECK(shrinkable != nullptr, "shrink_group: the group's backend (", pg->backend_name(),
                   ") cannot shrink");
  ShrinkResult result = shrinkable->shrink(ranks_to_exclude, options);
  if (excluded != nullptr) *excluded = result.excluded;
  auto& s = state();
  if (!group.is_default()) {
    std::vector<int> global;
    for (int old : result.survivors)
      global.push_back(group.global_ranks().empty() ? old : group.global_ranks()[old]);
    std::lock_guard lock(s.mu);
    s.sub_groups.push_back(result.group);
    return Group(std::move(result.group), std::move(global));
  }
  std::vector<std::weak_ptr<ProcessGroup>> subs;
  {
    std::lock_guard lock(s.mu);
    if (s.default_group != pg)
      throw InvalidArgument(
          "shrink_group: the default group was replaced by another thread while it shrank");
    s.default_group = result.group;
    subs = std::move(s.sub_groups);
    s.sub_groups.clear();
  }
  set_log_rank(result.group->rank());
  // Their ranks were numbered by the old default group: shut them down now
  // (without waiting: their peers may be the excluded ranks), as torch does.
  for (auto& weak : subs)
    if (auto sub = weak.lock()) sub->shutdown(Timeout(0));
  return Group{};
}

void destroy_process_group(const Group& group) {
  if (!group.is_member()) return;
  if (!group.is_default()) {
    if (group.process_group()) group.process_group()->shutdown();
    return;
  }
  timeline::finish();  // collective, while the store and the peers are there; off: nothing
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

std::shared_ptr<ProcessGroup> resolve_group(const Group& group, const char* call) {
  if (!group.is_member()) return nullptr;
  if (group.is_default()) return default_group_or_throw(call);
  COLLIE_ARG_CHECK(group.process_group() != nullptr, call, ": the group has no process group");
  return group.process_group();
}

}  // namespace collie
