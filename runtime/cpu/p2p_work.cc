#include "collie/runtime/cpu/p2p_work.h"

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie {

bool P2PWork::post_failed() const {
  if (!post_ || !post_->is_completed() || post_->is_success()) return false;
  const_cast<P2PWork*>(this)->mark_completed(post_->exception());
  return true;
}

bool P2PWork::is_completed() const {
  if (CompletionWork::is_completed() || post_failed()) return true;
  if (auto link = link_.lock()) {
    std::shared_lock lock(link->mu);
    if (link->owner)
      if (auto error = link->owner->poll()) const_cast<P2PWork*>(this)->mark_completed(error);
  }
  return CompletionWork::is_completed();
}

bool P2PWork::is_success() const { return is_completed() && CompletionWork::is_success(); }

std::exception_ptr P2PWork::exception() const {
  post_failed();
  return CompletionWork::exception();
}

void P2PWork::wait(Timeout timeout) {
  if (!CompletionWork::is_completed() && !post_failed()) {
    std::shared_ptr<Work> drive;
    if (auto link = link_.lock()) {
      std::shared_lock lock(link->mu);
      if (link->owner) drive = link->owner->drive(shared_from_this(), timeout_);
    }
    if (!drive) {
      mark_completed(std::make_exception_ptr(
          BackendError(str_cat(description(),
                               ": its process group was destroyed before it "
                               "completed"))));
    } else {
      // A wait with a timeout of its own leaves the drive running when it
      // passes (TimeoutError), as the Work contract says.
      try {
        drive->wait(timeout);
      } catch (const TimeoutError&) {
        if (timeout != kUnsetTimeout) throw;
        mark_completed(std::current_exception());
      } catch (...) {
        mark_completed(std::current_exception());
      }
      post_failed();
    }
  }
  CompletionWork::wait(timeout);
}

}  // namespace collie
