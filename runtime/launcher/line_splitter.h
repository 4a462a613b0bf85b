// LineSplitter: turns the bytes a worker writes, in whatever chunks the pipe
// delivers them, into whole lines. A line is only ever handed on complete, so
// lines from different workers interleave on the console but never mix
// mid-line. A last line without a newline is handed on by finish().
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace collie::launcher {

class LineSplitter {
 public:
  // Called with each line, without its '\n'.
  using LineFn = std::function<void(std::string_view line)>;

  // A line longer than max_line_bytes is handed on in pieces of that size:
  // a worker printing megabytes without a newline must not grow the
  // launcher without bound.
  explicit LineSplitter(LineFn on_line, size_t max_line_bytes = size_t{1} << 20)
      : on_line_(std::move(on_line)), max_line_bytes_(max_line_bytes) {}

  void feed(std::string_view bytes);
  // Hands on a pending partial line, if any.
  void finish();

 private:
  LineFn on_line_;
  size_t max_line_bytes_;
  std::string pending_;
};

}  // namespace collie::launcher
