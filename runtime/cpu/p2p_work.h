// P2PWork: the Work of an asynchronous send, recv or batch_isend_irecv of
// the cpu backend. Posting the batch is the op the group's queue runs (in
// issue order, like any call, and quickly); the batch itself then moves
// during every later op of the group, collectives included, and completes
// whenever its last message is in or out, not in the queue's order: a
// receive posted early never holds up the sends and collectives issued
// after it (torch's and MPI's semantics).
//
// Completion is seen where the group's ops run: at the end of each op the
// group looks at its outstanding batches. A thread that waits for one
// (wait()) queues an op that drives the connections until it is done
// (run at once on the waiting thread when the group is idle); one that
// asks is_completed() queues a single non-blocking poll, as MPI_Test
// drives progress.
#pragma once

#include <atomic>
#include <memory>
#include <shared_mutex>

#include "collie/base/deadline.h"
#include "collie/runtime/process_group/work.h"

namespace collie {

class P2PWork;

// What a P2PWork asks of its group, which it may outlive: the group clears
// `owner` (under mu) before it goes.
class P2POwner {
 public:
  virtual ~P2POwner() = default;
  // An op that drives `work`'s batch until it is done, under `timeout`.
  virtual std::shared_ptr<Work> drive(const std::shared_ptr<P2PWork>& work, Timeout timeout) = 0;
  // A non-blocking poll of the outstanding batches (at most one queued);
  // returns the error that broke the group, if it is broken.
  virtual std::exception_ptr poll() = 0;
};

struct P2PLink {
  // Shared by the Works that call the owner (a wait may drive for long, and
  // other Works' calls must not queue behind it); the group takes it alone
  // to clear `owner`.
  std::shared_mutex mu;
  P2POwner* owner = nullptr;
};

class P2PWork final : public CompletionWork, public std::enable_shared_from_this<P2PWork> {
 public:
  // `timeout`: the op's own (the drive's deadline).
  P2PWork(std::function<std::string()> describe, std::weak_ptr<P2PLink> link, Timeout timeout)
      : CompletionWork(std::move(describe)), link_(std::move(link)), timeout_(timeout) {}

  bool is_completed() const override;
  bool is_success() const override;
  void wait(Timeout timeout = kUnsetTimeout) override;
  std::exception_ptr exception() const override;

  // The op that posts the batch (set once, before the Work is handed out):
  // if it fails or is refused, so does this Work.
  void set_post(std::shared_ptr<Work> post) { post_ = std::move(post); }

 private:
  // Completes this Work with the post's error if the post failed.
  bool post_failed() const;

  const std::weak_ptr<P2PLink> link_;
  const Timeout timeout_;
  std::shared_ptr<Work> post_;
};

}  // namespace collie
