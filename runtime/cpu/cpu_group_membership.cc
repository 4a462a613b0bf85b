// CpuProcessGroup's membership changes: shrink (the survivors of a failure
// go on without the failed ranks) and grow / join (a replacement process
// joins a running group). Both end one generation of the group and connect
// the next through the same store, under keys of its own, so that nothing
// of the old connections, shared memory or sequence numbers can mix with
// the new (docs/reliability.md, "Surviving a failure").
#include <algorithm>
#include <charconv>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/cpu/cpu_process_group.h"
#include "collie/runtime/process_group/shrink_agreement.h"

namespace collie {
namespace {

// How long shrink's liveness checks (a connect to a listener) may take
// each: a refusal comes back at once, a cut link gives no answer.
constexpr auto kLivenessCheck = std::chrono::milliseconds(500);

// A joiner's admission, under "admit/<ticket>":
// "<prefix>\n<rank>\n<size>\n<generation>". Its ticket is claimed first
// ("claim/<ticket>": "claimed" by rank 0, or "withdrawn" by a joiner that
// gave up; compare_set decides which came first).
struct Admission {
  std::string prefix;
  int rank = -1, size = -1, generation = -1;
};

std::string encode(const Admission& a) {
  return str_cat(a.prefix, "\n", a.rank, "\n", a.size, "\n", a.generation);
}

Admission decode(const std::string& text, const std::string& key) {
  Admission a;
  std::vector<std::string> parts;
  size_t pos = 0;
  while (parts.size() < 4) {
    const size_t nl = std::min(text.find('\n', pos), text.size());
    parts.push_back(text.substr(pos, nl - pos));
    if (nl == text.size()) break;
    pos = nl + 1;
  }
  auto number = [&](const std::string& s, int* out) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return ec == std::errc() && end == s.data() + s.size();
  };
  if (parts.size() != 4 || parts[0].empty() || !number(parts[1], &a.rank) ||
      !number(parts[2], &a.size) || !number(parts[3], &a.generation) || a.rank < 0 ||
      a.rank >= a.size)
    throw BackendError(str_cat("join: the store's answer under \"", key,
                               "\" is not an admission: \"", text, "\""));
  a.prefix = parts[0];
  return a;
}

}  // namespace

ShrinkResult CpuProcessGroup::shrink(std::span<const int> exclude, const ShrinkOptions& options) {
  CallSite where = site("shrink");
  check_timeout(where, options.timeout);
  for (int r : exclude) {
    check_peer(where, r, size_, false);
    if (r == rank_)
      throw InvalidArgument(str_cat("shrink on rank ", rank_, ": rank ", r,
                                    " is in the list to exclude; only the ranks that stay call "
                                    "shrink"));
  }
  if (store_ == nullptr)
    throw InvalidArgument(str_cat("shrink on rank ", rank_, ": the group has no store"));
  const auto start = Clock::now();
  const std::string what = describe_what(group_name_, rank_, size_, generation_);

  // Revoke: pending calls finish within the timeout (kDefault) or fail at
  // once (kAbort, or a group a failure already broke); later calls fail.
  if (options.mode == ShrinkMode::kAbort || executor_.broken()) {
    executor_.abort(std::make_exception_ptr(BackendError(str_cat(what, " was revoked by shrink"))),
                    [this] { abort_communicator(); });
  }
  executor_.shutdown(op_timeout(options.timeout), [this] { abort_communicator(); });

  // Agree on who is left out: what the caller names, and what this rank's
  // connections saw fail. The agreement has a budget of its own, so that a
  // long drain cannot leave it none.
  const Deadline deadline(op_timeout(options.timeout));
  std::vector<int> suspects(exclude.begin(), exclude.end());
  FindDead find_dead;
  if (communicator_) {
    for (int r :
         communicator_->failed_ranks(std::min(deadline.when(), Clock::now() + kLivenessCheck)))
      suspects.push_back(r);
    find_dead = [comm = communicator_.get()](const std::vector<int>& ranks,
                                             Clock::time_point until) {
      return comm->find_dead(ranks, until);
    };
  }
  const uint64_t attempt = shrink_attempts_++;
  const ShrinkDecision decision =
      agree_on_shrink(*store_, str_cat(options_.store_prefix, "/"), rank_, size_,
                      std::move(suspects), attempt, deadline, find_dead);
  // The old connections and shared memory go now, not when the last
  // reference to this group does (kept until here: while the others agree,
  // a listener that accepts is how they tell this rank is alive). A broken
  // communicator closes without a goodbye; a healthy one says goodbye, so
  // that no peer takes it for a crash.
  release_communicator();
  ShrinkResult result;
  result.survivors = decision.survivors;
  result.excluded = decision.excluded;
  result.agreed_after = Clock::now() - start;
  if (options.exact) {
    std::vector<int> asked(exclude.begin(), exclude.end());
    std::sort(asked.begin(), asked.end());
    asked.erase(std::unique(asked.begin(), asked.end()), asked.end());
    if (asked != decision.excluded)
      throw BackendError(
          str_cat("shrink on rank ", rank_, " of ", what, ": asked to exclude ranks [",
                  collie::join(asked, ", "), "], but the survivors agreed to exclude [",
                  collie::join(decision.excluded, ", "),
                  "] (what the ranks saw fail is excluded too); shrink again excluding those"));
  }

  // The next generation: the survivors, under keys of their own (the
  // attempt in the prefix keeps a retry's keys apart from a failed one's).
  CommunicatorOptions next = options_;
  next.store_prefix = str_cat(options_.store_prefix, generation_ == 0 ? "/g" : "+", attempt);
  next.timeout = op_timeout(options.timeout);  // a budget of its own: see ShrinkOptions
  auto communicator = Communicator::connect(*store_, decision.new_rank,
                                            static_cast<int>(decision.survivors.size()), next);
  next.timeout = options_.timeout;
  std::vector<int> survivors_global;
  for (int old_rank : decision.survivors)
    survivors_global.push_back(global_ranks_.at(static_cast<size_t>(old_rank)));
  auto group =
      std::make_shared<CpuProcessGroup>(std::move(communicator), store_, timeout_, group_name_,
                                        SerialExecutor::CallerPolicy::kOneAtATime, std::move(next),
                                        generation_ + 1, std::move(survivors_global), group_desc_);
  result.connected_after = Clock::now() - start;
  COLLIE_LOG(kInfo) << what << " shrank to "
                    << describe_what(group_name_, group->rank(), group->size(), generation_ + 1)
                    << " excluding ranks [" << collie::join(decision.excluded, ", ") << "] in "
                    << format_duration(result.connected_after);
  result.group = std::move(group);
  return result;
}

GrowResult CpuProcessGroup::grow(Timeout timeout) {
  CallSite where = site("grow");
  check_timeout(where, timeout);
  if (store_ == nullptr)
    throw InvalidArgument(str_cat("grow on rank ", rank_, ": the group has no store"));
  const Deadline deadline(op_timeout(timeout));
  const std::string keys = join_prefix();
  // Rank 0 claims the tickets of the processes asking to join (one that
  // gave up withdrew its ticket first, and is skipped) and every member
  // learns the counts in an all_reduce: every member takes part, so one
  // that died fails it everywhere before anything changes.
  int64_t counts[3] = {0, 0, 0};  // admitted so far, tickets taken, tickets claimed now
  std::vector<int64_t> claimed;
  if (rank_ == 0) {
    counts[0] = store_->add(keys + "admitted", 0);
    counts[1] = store_->add(keys + "n", 0);
    for (int64_t t = counts[0] + 1; t <= counts[1]; ++t) {
      // "claimed" again after an attempt that failed before admitting.
      if (to_string(store_->compare_set(str_cat(keys, "claim/", t), Bytes{},
                                        to_bytes("claimed"))) == "claimed")
        claimed.push_back(t);
    }
    counts[2] = static_cast<int64_t>(claimed.size());
  }
  all_reduce(view(counts, 3),
             {.op = ReduceOp::kMax, .timeout = deadline.remaining(), .async_op = false})
      ->wait();
  if (counts[1] == counts[0]) return {};  // nobody asked
  const int64_t joining = counts[2];
  const int size = size_ + static_cast<int>(joining);
  CommunicatorOptions next = options_;
  // The ticket count only grows, so this prefix is the group's first use.
  next.store_prefix = str_cat(options_.store_prefix, "+j", counts[1]);
  if (rank_ == 0) {
    for (size_t i = 0; i < claimed.size(); ++i) {
      const Admission a{next.store_prefix, size_ + static_cast<int>(i), size, generation_ + 1};
      store_->set(str_cat(keys, "admit/", claimed[i]), encode(a));
    }
    store_->add(keys + "admitted", counts[1] - counts[0]);
  }
  if (joining == 0) return {};  // every one that asked gave up
  // Retire this generation: its calls are done (the broadcast above was
  // the last); a healthy communicator says goodbye as it closes.
  executor_.shutdown(deadline.remaining(), [this] { abort_communicator(); });
  release_communicator();
  next.timeout = deadline.remaining();
  auto communicator = Communicator::connect(*store_, rank_, size, next);
  next.timeout = options_.timeout;
  // The joiners' ranks in the world are theirs to tell: the recorder lists
  // the group as ranks 0..size-1.
  auto group =
      std::make_shared<CpuProcessGroup>(std::move(communicator), store_, timeout_, group_name_,
                                        SerialExecutor::CallerPolicy::kOneAtATime, std::move(next),
                                        generation_ + 1, std::vector<int>{}, group_desc_);
  COLLIE_LOG(kInfo) << describe_what(group_name_, rank_, size_, generation_) << " admitted "
                    << joining << (joining == 1 ? " process" : " processes") << ": now "
                    << describe_what(group_name_, rank_, size, generation_ + 1);
  return {std::move(group), static_cast<int>(joining)};
}

std::shared_ptr<CpuProcessGroup> CpuProcessGroup::join(const BackendContext& context,
                                                       const CommunicatorOptions& options) {
  COLLIE_ARG_CHECK(context.store != nullptr, "the cpu backend needs a store");
  CommunicatorOptions comm_options = connect_options(context, options);
  const Deadline deadline(context.timeout);
  const std::string keys = str_cat("socket/", context.group_name, "/join/");
  const int64_t ticket = context.store->add(keys + "n", 1);
  const std::string key = str_cat(keys, "admit/", ticket);
  COLLIE_LOG(kInfo) << "asking to join process group \"" << context.group_name << "\" (ticket "
                    << ticket << ")";
  try {
    context.store->wait({key}, deadline.remaining());
  } catch (const TimeoutError& e) {
    // Withdraw, unless a member claimed the ticket meanwhile: then the
    // members are connecting with this process, and it must come.
    if (to_string(context.store->compare_set(str_cat(keys, "claim/", ticket), Bytes{},
                                             to_bytes("withdrawn"))) == "withdrawn")
      throw TimeoutError(str_cat("join: no member of process group \"", context.group_name,
                                 "\" admitted this process (ticket ", ticket, ") ",
                                 deadline.describe(),
                                 ": the members admit joiners when they call grow "
                                 "(admit_joiners), at a step boundary; ",
                                 e.what()));
    context.store->wait({key}, context.timeout);
  }
  const Admission a = decode(to_string(context.store->get(key)), key);
  comm_options.store_prefix = a.prefix;
  comm_options.timeout = deadline.remaining();
  auto communicator = Communicator::connect(*context.store, a.rank, a.size, comm_options);
  comm_options.timeout = context.timeout;
  COLLIE_LOG(kInfo) << "joined " << describe_what(context.group_name, a.rank, a.size, a.generation)
                    << " after " << format_duration(deadline.elapsed());
  return std::make_shared<CpuProcessGroup>(
      std::move(communicator), context.store, context.timeout, context.group_name,
      SerialExecutor::CallerPolicy::kOneAtATime, std::move(comm_options), a.generation);
}

}  // namespace collie
