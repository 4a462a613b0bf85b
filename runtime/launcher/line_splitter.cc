#include "collie/runtime/launcher/line_splitter.h"

namespace collie::launcher {

void LineSplitter::feed(std::string_view bytes) {
  while (!bytes.empty()) {
    size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      pending_.append(bytes);
      while (pending_.size() >= max_line_bytes_) {
        on_line_(std::string_view(pending_).substr(0, max_line_bytes_));
        pending_.erase(0, max_line_bytes_);
      }
      return;
    }
    if (pending_.empty()) {
      on_line_(bytes.substr(0, nl));  // the common case: no copy
    } else {
      pending_.append(bytes.substr(0, nl));
      on_line_(pending_);
      pending_.clear();
    }
    bytes.remove_prefix(nl + 1);
  }
}

void LineSplitter::finish() {
  if (pending_.empty()) return;
  on_line_(pending_);
  pending_.clear();
}

}  // namespace collie::launcher
