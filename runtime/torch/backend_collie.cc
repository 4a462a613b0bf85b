// BackendCollie's lifecycle, the dispatch of one operation to its device's
// path, coalescing, split, shrink and abort. The operations themselves are in
// backend_ops.cc.
#include "collie/runtime/torch/backend_collie.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <set>
#include <utility>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/prefix_store.h"
#include "collie/runtime/cpu/cpu_process_group.h"
#include "collie/runtime/process_group/backend_context.h"
#include "collie/runtime/process_group/flight_recorder.h"
#include "collie/runtime/torch/collie_work.h"
#include "collie/runtime/torch/torch_store.h"

namespace collie::torch_adapter {
namespace {

using ::c10d::OpType;

// The Work of an operation issued between startCoalescing and endCoalescing:
// it completes with the batch endCoalescing runs, whose Work it forwards to.
// Before that nothing has run: it is not completed, and wait() returns at
// once, as NCCL's does inside a group (torch's Python wrappers wait on
// every blocking call, coalesced or not); the results are there once the
// Work endCoalescing returns has been waited for.
//
// Its completion key is its own; the batch's Work runs the completion hooks
// for it when the batch succeeds.
class DeferredWork final : public ::c10d::Work {
 public:
  DeferredWork(int rank, OpType type, std::vector<at::Tensor> outputs)
      : Work(rank, type), outputs_(std::move(outputs)) {}
  uint64_t completion_key() const { return key_; }
#ifdef C10D_BACKEND_HAS_HOOKS
  uint64_t getCompletionKey() const override { return key_; }
#endif
  float getDuration() const override {
    auto b = batch();
    TORCH_CHECK(b, "collie: getDuration() on an operation of an open coalescing block");
    return b->getDuration();
  }
  void attach(c10::intrusive_ptr<::c10d::Work> batch) {
    std::lock_guard lock(mutex_);
    batch_ = std::move(batch);
  }
  bool isCompleted() override {
    auto b = batch();
    return b && b->isCompleted();
  }
  bool isSuccess() const override {
    auto b = batch();
    return b && b->isSuccess();
  }
  std::exception_ptr exception() const override {
    auto b = batch();
    return b ? b->exception() : nullptr;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {
    if (auto b = batch()) b->synchronize();
  }
  bool wait(std::chrono::milliseconds timeout) override {
    auto b = batch();
    return b ? b->wait(timeout) : true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    auto b = batch();
    if (!b)
      throw InvalidArgument(
          str_cat("collie: getFuture() on an operation of an open coalescing "
                  "block (rank ",
                  rank_, "); ask the Work endCoalescing returns"));
    return b->getFuture();
  }

 private:
  c10::intrusive_ptr<::c10d::Work> batch() const {
    std::lock_guard lock(mutex_);
    return batch_;
  }
  const std::vector<at::Tensor> outputs_;
  const uint64_t key_ = next_completion_key();
  c10::intrusive_ptr<::c10d::Work> batch_;
};

// A collective that failed (collie::Error: a timeout, a mismatch, a lost
// peer), not a call refused for its arguments.
bool failed_collective(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument&) {
    return false;
  } catch (const Error&) {
    return true;
  } catch (...) {
    return false;
  }
}

void run_here(const std::function<void()>& wait) { wait(); }
std::atomic<BackendCollie::Blocking> g_blocking{&run_here};

// Every BackendCollie alive, for quiesce_all().
std::mutex g_live_mu;
std::set<BackendCollie*> g_live;

}  // namespace

void BackendCollie::set_blocking(Blocking blocking) { g_blocking.store(blocking); }

bool BackendCollie::torch_recorder_attached() {
  std::lock_guard lock(g_live_mu);
  for (BackendCollie* b : g_live)
    if (b->torch_dumps_->load()) return true;
  return false;
}

void BackendCollie::quiesce_all(std::chrono::milliseconds grace) {
  g_blocking.load()([grace] {
    std::lock_guard lock(g_live_mu);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    for (BackendCollie* b : g_live) {
      if (b->executor_->wait_idle_until(deadline)) continue;
      b->abort();
      b->executor_->wait_idle_until(std::chrono::steady_clock::now() + grace);
    }
  });
}

c10::intrusive_ptr<BackendCollie> BackendCollie::create(
    const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size, Timeout timeout,
    Identity who) {
  // A list that does not fit the group says nothing: the group's own ranks.
  if (static_cast<int>(who.global_ranks.size()) != size) {
    who.global_ranks.clear();
    for (int r = 0; r < size; ++r) who.global_ranks.push_back(r);
  }
  const std::string group_name = who.group_name;
  auto collie_store = std::make_shared<TorchStore>(store);
  BackendContext context;
  context.store = collie_store;
  context.rank = rank;
  context.size = size;
  context.timeout = resolve_timeout(timeout);
  context.group_name = group_name;
  // What collie's flight recorder files this group's calls under (its
  // profiling names are "collie:<op>").
  context.group_desc = who.group_desc;
  context.global_ranks = who.global_ranks;
  // The dump is named after this process's rank in the world. (The cpu
  // backend watches the first group's store for other ranks' requests to
  // dump: the world group's, which torch creates first.)
  FlightRecorder& recorder = FlightRecorder::get();
  if (who.group_desc == "default_pg" || recorder.global_rank() < 0)
    recorder.set_global_rank(who.global_ranks[rank]);
  auto cpu = CpuProcessGroup::create(context);
  std::string why_not;
  auto cuda = make_cuda_path({.store = std::make_shared<PrefixStore>("cuda/", collie_store),
                              .rank = rank,
                              .size = size,
                              .timeout = context.timeout,
                              .group_name = group_name},
                             &why_not);
  auto backend = c10::make_intrusive<BackendCollie>(
      std::move(cpu), std::move(cuda), std::move(why_not), store, context.timeout, std::move(who));
  backend->setGroupDesc(backend->who_.group_desc);
  return backend;
}

BackendCollie::BackendCollie(std::shared_ptr<CpuProcessGroup> cpu, std::unique_ptr<CudaPath> cuda,
                             std::string no_cuda_reason, c10::intrusive_ptr<::c10d::Store> store,
                             Timeout timeout, Identity who)
    : Backend(cpu->rank(), cpu->size()),
      cpu_(std::move(cpu)),
      cuda_(std::move(cuda)),
      no_cuda_reason_(std::move(no_cuda_reason)),
      store_(std::move(store)),
      who_(std::move(who)),
      timeout_ms_(resolve_timeout(timeout).count()),
      executor_(&cpu_->executor()),
      // Two threads' calls meeting abort the cpu group (the executor's
      // rule 5): the call in progress fails at once, and the peers'
      // matching calls, which may have paired with the wrong call, fail as
      // the connections close.
      executor_ref_(std::shared_ptr<SerialExecutor>(cpu_, executor_)) {
  std::lock_guard lock(g_live_mu);
  g_live.insert(this);
}

BackendCollie::~BackendCollie() {
  {
    std::lock_guard lock(g_live_mu);
    g_live.erase(this);
  }
  {
    std::lock_guard lock(listener_mu_);
    if (dump_listener_ >= 0) remove_dump_listener(dump_listener_);
    dump_listener_ = -1;
  }
  shutdown();
}

c10::intrusive_ptr<::c10d::Backend::Options> BackendCollie::getBackendOptions() {
  auto options = c10::make_intrusive<Options>(kBackendName, Timeout(timeout_ms_.load()));
  options->group_name = who_.group_name;
  options->group_desc = getGroupDesc();
  for (int r : who_.global_ranks) options->global_ranks_in_group.push_back(r);
  return options;
}

#ifdef C10D_BACKEND_HAS_HOOKS
void BackendCollie::registerCompletionHook(int64_t hook_id, ::c10d::CompletionHook hook) {
  TORCH_CHECK(hook, "collie: registerCompletionHook(", hook_id, ") with an empty hook");
  const bool added = completion_hooks_->add(
      hook_id, [hook = std::move(hook)](uint64_t key, std::optional<float> ms) {
        hook(::c10d::CompletionHookArgs{key, ms});
      });
  TORCH_CHECK(added, "collie: completion hook ", hook_id, " is already registered on group \"",
              who_.group_name, "\"");
  update_dump_listener();
}

void BackendCollie::unregisterCompletionHook(int64_t hook_id) {
  const bool removed = completion_hooks_->remove(hook_id);
  update_dump_listener();
  TORCH_CHECK(removed, "collie: no completion hook ", hook_id, " is registered on group \"",
              who_.group_name, "\"");
}

void BackendCollie::registerAbortHook(int64_t hook_id, ::c10d::AbortHook hook) {
  TORCH_CHECK(hook, "collie: registerAbortHook(", hook_id, ") with an empty hook");
  TORCH_CHECK(abort_hooks_->add(hook_id, std::move(hook)), "collie: abort hook ", hook_id,
              " is already registered on group \"", who_.group_name, "\"");
  update_dump_listener();
}

void BackendCollie::unregisterAbortHook(int64_t hook_id) {
  const bool removed = abort_hooks_->remove(hook_id);
  update_dump_listener();
  TORCH_CHECK(removed, "collie: no abort hook ", hook_id, " is registered on group \"",
              who_.group_name, "\"");
}
#endif

// One listener per group that torch's recorder is attached to. It holds
// the hooks (not the group), so a dump that races the group's destruction
// runs them safely.
void BackendCollie::update_dump_listener() {
  std::lock_guard lock(listener_mu_);
  const bool want = !abort_hooks_->empty() && !completion_hooks_->empty();
  if (want && dump_listener_ < 0) {
    dump_listener_ = add_dump_listener([hooks = abort_hooks_] { hooks->run(); });
  } else if (!want && dump_listener_ >= 0) {
    remove_dump_listener(dump_listener_);
    dump_listener_ = -1;
  }
  torch_dumps_->store(want);
}

void BackendCollie::setTimeout(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0)
    throw InvalidArgument(str_cat(site("setTimeout"), ": the timeout must be positive, not ",
                                  timeout.count(), " ms"));
  timeout_ms_.store(timeout.count());
}

Timeout BackendCollie::timeout(std::chrono::milliseconds requested) const {
  return requested == kUnsetTimeout ? Timeout(timeout_ms_.load(std::memory_order_relaxed))
                                    : requested;
}

collie::ProcessGroup& BackendCollie::cpu_group() { return *cpu_; }

CudaPath& BackendCollie::cuda_path(const Site& where) {
  if (!cuda_)
    throw InvalidArgument(str_cat(where, ": a CUDA tensor, but ", no_cuda_reason_,
                                  "; pass CPU tensors, or use \"cpu:collie,cuda:nccl\""));
  return *cuda_;
}

c10::intrusive_ptr<::c10d::Work> BackendCollie::launch(Launch call, Body body,
                                                       std::vector<uint64_t> also_completed) {
  if (call.type != OpType::BARRIER && call.type != OpType::SEND && call.type != OpType::RECV &&
      call.type != OpType::RECVANYSOURCE)
    sequence_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard lock(coalescing_mu_);
    if (coalescing_) {
      auto work = c10::make_intrusive<DeferredWork>(rank_, call.type, call.outputs);
      deferred_.push_back(Deferred{std::move(call), std::move(body), std::nullopt, {}, {}, work});
      return work;
    }
  }
  if (call.device.is_cuda()) return cuda_path(site(call.op)).launch(std::move(call), body);
  return run_cpu(std::move(call), std::move(body), std::move(also_completed));
}

c10::intrusive_ptr<::c10d::Work> BackendCollie::run_cpu(Launch call, Body body,
                                                        std::vector<uint64_t> also_completed) {
  const bool async = call.async;
  const char* op = call.op;
  auto work = c10::make_intrusive<CollieWork>(rank_, call.type, op, std::move(call.outputs),
                                              executor_ref_, completion_hooks_);
  work->set_also_completed(std::move(also_completed));
  work->set_ticket(executor_->submitted() + 1);
  // Runs on the executor, which the group owns (a plain pointer); the
  // collie calls the Body makes run inside it (the executor's rule 4), and
  // a failed one has broken the executor already. An error of the
  // adapter's own (a copy back) fails this Work alone.
  auto run = [work, body = std::move(body), group = cpu_.get()](const Deadline&) {
    work->start();
    try {
      // Copies into and out of staging buffers are no part of any autograd
      // graph (and a leaf that requires grad refuses in-place ones).
      at::NoGradGuard no_grad;
      if (auto w = body(*group)) {
        w->wait();
        if (work->is_receive_from_any()) work->set_source_rank(w->source_rank());
      }
    } catch (...) {
      work->set_op_error(std::current_exception());
    }
  };
  std::shared_ptr<collie::Work> ran;
  try {
    if (async)
      ran = executor_->submit(op, {}, kUnsetTimeout, SerialExecutor::to_op_fn(std::move(run)));
    else
      ran = executor_->run_or_submit(
          op, [] { return std::string(); }, kUnsetTimeout, std::move(run));
  } catch (...) {  // a call that met another thread's: DistBackendError
    std::rethrow_exception(as_torch_error(std::current_exception()));
  }
  if (!async && !ran->is_completed()) {
    // Queued behind asynchronous operations: this thread runs them and
    // its own (the executor's rule 3), and returns once it ran.
    try {
      ran->wait();
    } catch (...) {  // the executor's verdict, read below
    }
  }
  if (ran->is_completed()) {
    settle_cpu(*work, ran->exception());
    return work;
  }
  work->set_queued(ran);
  static_cast<CompletionWork&>(*ran).on_completed(
      [work, aborts = abort_hooks_, dumps = torch_dumps_](std::exception_ptr error) {
        settle_cpu(*work, std::move(error), aborts.get(), dumps.get());
      });
  return work;
}

void BackendCollie::settle_cpu(CollieWork& work, std::exception_ptr verdict) {
  settle_cpu(work, std::move(verdict), abort_hooks_.get(), torch_dumps_.get());
}

void BackendCollie::settle_cpu(CollieWork& work, std::exception_ptr verdict,
                               const AbortHooks* aborts, const std::atomic<bool>* torch_dumps) {
  // The operation's own error, else the executor's: a refusal (the group is
  // broken) or, once two threads' calls met, the error naming them (the
  // operation's data may be another call's).
  std::exception_ptr error = work.op_error() ? work.op_error() : std::move(verdict);
  // The dump listener has run the abort hooks already when torch's
  // recorder is attached (collie's cpu backend dumps on the failure).
  if (error && !aborts->empty() && !torch_dumps->load() && failed_collective(error)) aborts->run();
  work.complete(error);
}

c10::intrusive_ptr<::c10d::Work> BackendCollie::launch_deferred_p2p_locked(
    Launch call, const P2POp& op, const at::Tensor& user, const at::Tensor& buffer) {
  auto work = c10::make_intrusive<DeferredWork>(rank_, call.type, call.outputs);
  const bool staged = !buffer.is_same(user);
  deferred_.push_back(Deferred{std::move(call), nullptr, op, staged ? user : at::Tensor(),
                               staged ? buffer : at::Tensor(), work});
  return work;
}

void BackendCollie::startCoalescing() {
  std::lock_guard lock(coalescing_mu_);
  if (coalescing_)
    throw InvalidArgument(str_cat(site("startCoalescing"),
                                  ": a coalescing block is already open (endCoalescing first)"));
  coalescing_ = true;
  deferred_.clear();
}

// One operation that runs what the block issued, in issue order; the
// point-to-point operations between two collectives (or at the end) go
// together as one batch_isend_irecv, so that a ring of sends and receives
// cannot deadlock.
c10::intrusive_ptr<::c10d::Work> BackendCollie::endCoalescing() {
  std::vector<Deferred> ops;
  {
    std::lock_guard lock(coalescing_mu_);
    if (!coalescing_)
      throw InvalidArgument(
          str_cat(site("endCoalescing"), ": no coalescing block is open (startCoalescing first)"));
    coalescing_ = false;
    ops.swap(deferred_);
  }
  Launch batch{"coalesced", OpType::COALESCED, Device::cpu(), /*async=*/true, {}, {}};
  for (size_t i = 0; i < ops.size(); ++i) {
    const Launch& c = ops[i].call;
    if (i > 0 && !(c.device == batch.device))
      throw InvalidArgument(str_cat(site("endCoalescing"), ": the block mixes ",
                                    to_string(batch.device), " and ", to_string(c.device),
                                    " tensors; one block takes tensors of one device"));
    batch.device = c.device;
    batch.outputs.insert(batch.outputs.end(), c.outputs.begin(), c.outputs.end());
    batch.in_use.insert(batch.in_use.end(), c.in_use.begin(), c.in_use.end());
  }
  const Timeout deadline = timeout(kUnsetTimeout);
  auto steps = std::make_shared<std::vector<Deferred>>(std::move(ops));
  const bool only_p2p =
      !steps->empty() && std::all_of(steps->begin(), steps->end(),
                                     [](const Deferred& step) { return step.p2p.has_value(); });
  if (only_p2p && !batch.device.is_cuda()) {
    // torch's batch_isend_irecv: posted, not waited for in the queue, so a
    // batch of receives issued early holds up nothing issued after it.
    sequence_.fetch_add(1, std::memory_order_relaxed);  // as launch() counts a block
    std::vector<uint64_t> keys;
    std::vector<P2POp> p2p;
    for (auto& step : *steps) {
      keys.push_back(static_cast<DeferredWork*>(step.work.get())->completion_key());
      p2p.push_back(*step.p2p);
      batch.in_use.push_back(step.p2p_buffer.defined() ? step.p2p_buffer : step.p2p_user);
    }
    batch.in_use.insert(batch.in_use.end(), batch.outputs.begin(), batch.outputs.end());
    std::function<void()> finish = [steps] {
      for (auto& step : *steps)
        if (step.p2p_buffer.defined()) copy_back(step.p2p_user, step.p2p_buffer);
    };
    auto work = run_cpu_p2p(
        std::move(batch),
        [p2p = std::move(p2p), deadline](collie::ProcessGroup& g) {
          return g.batch_isend_irecv(p2p, deadline);
        },
        std::move(finish), std::move(keys));
    for (auto& step : *steps) static_cast<DeferredWork*>(step.work.get())->attach(work);
    return work;
  }
  Body body = [steps, deadline](collie::ProcessGroup& g) -> std::shared_ptr<collie::Work> {
    std::vector<P2POp> p2p;
    std::shared_ptr<collie::Work> last;
    auto flush = [&] {
      if (p2p.empty()) return;
      last = g.batch_isend_irecv(p2p, deadline);
      p2p.clear();
    };
    for (auto& step : *steps) {
      if (step.p2p) {
        p2p.push_back(*step.p2p);
        continue;
      }
      flush();
      last = step.body(g);
    }
    flush();
    bool copies = false;
    for (auto& step : *steps) copies |= step.p2p_buffer.defined();
    if (copies && last) {
      last->synchronize();
      last = nullptr;
      for (auto& step : *steps)
        if (step.p2p_buffer.defined()) copy_back(step.p2p_user, step.p2p_buffer);
    }
    return last;
  };
  std::vector<uint64_t> keys;
  for (auto& step : *steps)
    keys.push_back(static_cast<DeferredWork*>(step.work.get())->completion_key());
  // Nothing was issued: a completed Work, as torch's gloo gives.
  auto work = launch(std::move(batch), std::move(body), std::move(keys));
  for (auto& step : *steps) static_cast<DeferredWork*>(step.work.get())->attach(work);
  return work;
}

c10::intrusive_ptr<::c10d::Backend> BackendCollie::split(
    const c10::intrusive_ptr<::c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& opts) {
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  if (me == ranks.end()) return nullptr;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] < 0 || ranks[i] >= size_ || (i > 0 && ranks[i] <= ranks[i - 1]))
      throw InvalidArgument(str_cat(site("split"), ": ranks must be distinct group ranks below ",
                                    size_, " in increasing order; got ", join(ranks, ", ")));
  const Timeout t = opts ? Timeout(opts->timeout) : Timeout(timeout_ms_.load());
  Identity who;
  who.group_name =
      opts && !opts->group_name.empty() ? opts->group_name : str_cat(who_.group_name, ":split");
  if (opts && !opts->group_desc.empty()) who.group_desc = opts->group_desc;
  if (opts && opts->global_ranks_in_group.size() == ranks.size()) {
    for (uint64_t r : opts->global_ranks_in_group) who.global_ranks.push_back(static_cast<int>(r));
  } else {
    for (int r : ranks) who.global_ranks.push_back(who_.global_ranks[r]);
  }
  return create(store, static_cast<int>(me - ranks.begin()), static_cast<int>(ranks.size()), t,
                std::move(who));
}

bool BackendCollie::can_shrink() const { return !cuda_ || !cuda_->has_communicator(); }

c10::intrusive_ptr<BackendCollie> BackendCollie::shrink_to(
    const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
    const c10::intrusive_ptr<Options>& opts_override) {
  const Site where = site("shrink");
  if (shrink_flags != kShrinkDefault && shrink_flags != kShrinkAbort)
    throw InvalidArgument(str_cat(where, ": shrink_flags ", shrink_flags,
                                  " is neither SHRINK_DEFAULT (0) nor SHRINK_ABORT (1)"));
  if (!can_shrink())
    throw InvalidArgument(
        str_cat(where,
                ": this group's CUDA tensors have an NCCL communicator, which "
                "collie cannot shrink; shrink a group used for CPU tensors only"));
  std::vector<int> exclude;
  for (int64_t r : ranks_to_exclude) {
    if (r < 0 || r >= size_)
      throw InvalidArgument(
          str_cat(where, ": rank ", r, " to exclude is not a rank of this group of ", size_));
    exclude.push_back(static_cast<int>(r));
  }
  const Timeout limit = opts_override && opts_override->timeout.count() > 0
                            ? Timeout(opts_override->timeout)
                            : Timeout(timeout_ms_.load());
  const std::string name = opts_override && !opts_override->group_name.empty()
                               ? std::string(opts_override->group_name)
                               : who_.group_name;
  ShrinkOptions options;
  options.mode = shrink_flags == kShrinkAbort ? ShrinkMode::kAbort : ShrinkMode::kDefault;
  options.exact = true;  // torch numbers the new group from the caller's list
  ShrinkResult result;
  std::exception_ptr error;
  // Blocks for the agreement and the new group's connections: without
  // Python's GIL, since a callback chained on a pending operation's future
  // may need it to finish.
  g_blocking.load()([&] {
    try {
      const auto deadline = std::chrono::steady_clock::now() + limit;
      // SHRINK_DEFAULT: what this adapter still holds in the queue reaches
      // the group and finishes (or fails) first; the group's own shrink
      // then bounds the rest by the same deadline.
      if (options.mode == ShrinkMode::kDefault) executor_->wait_idle_until(deadline);
      options.timeout =
          std::max(std::chrono::duration_cast<Timeout>(deadline - std::chrono::steady_clock::now()),
                   Timeout(1));
      result = cpu_->shrink(exclude, options);
    } catch (...) {
      error = std::current_exception();
    }
  });
  if (error) std::rethrow_exception(as_torch_error(error));
  auto group = std::dynamic_pointer_cast<CpuProcessGroup>(result.group);
  if (!group)
    throw BackendError(str_cat(where, ": collie's cpu backend returned a group of another kind"));
  // The new group's CUDA path makes its communicator on first use, under
  // keys of the new generation.
  auto collie_store = std::make_shared<TorchStore>(store_);
  std::string why_not;
  auto cuda = make_cuda_path({.store = std::make_shared<PrefixStore>(
                                  str_cat("cuda/g", group->generation(), "/"), collie_store),
                              .rank = group->rank(),
                              .size = group->size(),
                              .timeout = limit,
                              .group_name = name},
                             &why_not);
  Identity who{name, getGroupDesc(), {}};
  std::vector<bool> gone(size_, false);
  for (int r : exclude) gone[r] = true;
  for (int r = 0; r < size_; ++r)
    if (!gone[r]) who.global_ranks.push_back(who_.global_ranks[r]);
  auto child = c10::make_intrusive<BackendCollie>(
      std::move(group), std::move(cuda), std::move(why_not), store_, limit, std::move(who));
  child->setGroupDesc(getGroupDesc());
  return child;
}

void BackendCollie::setSequenceNumberForGroup() {}

uint64_t BackendCollie::getSequenceNumberForGroup() { return sequence_.load(); }

void BackendCollie::abort() {
  const std::string reason = str_cat("process group \"", who_.group_name, "\" (collie, rank ",
                                     rank_, " of ", size_, ") was aborted (abort() called)");
  cpu_->abort(reason);
  if (cuda_) cuda_->abort(reason);
}

void BackendCollie::shutdown() {
  g_blocking.load()([this] {
    executor_->drain();
    cpu_->shutdown();
    if (cuda_) cuda_->shutdown();
  });
}

void BackendCollie::waitForPendingWorks() {
  g_blocking.load()([this] { executor_->drain(); });
}

::c10d::ErrorType BackendCollie::getError() {
  return cpu_->broken() ? ::c10d::ErrorType::COMM_ERROR : ::c10d::ErrorType::SUCCESS;
}

}  // namespace collie::torch_adapter
