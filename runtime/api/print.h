// The tutorial's printing idiom, built in. A DDP script calls
//
//   collie::setup_for_distributed(collie::get_rank() == 0);
//   collie::print("epoch", epoch, "loss", loss);          // rank 0 only
//   collie::print(collie::force, "rank", rank, "is done"); // every rank
//
// print() writes its arguments like Python's print: separated by spaces, one
// newline, to stdout, as one write per line (lines from several threads or
// ranks never interleave mid-line), flushed. Before setup_for_distributed is
// called every rank prints.
#pragma once

#include <sstream>
#include <string>

namespace collie {

// Passed first, makes print() print on every rank (the tutorial's force=True).
struct ForcePrint {};
inline constexpr ForcePrint force{};

// is_master: this rank prints; other ranks stay silent unless forced, and
// their log level is raised to at least WARN (so INFO chatter comes from the
// master only, while warnings and errors still come from every rank).
void setup_for_distributed(bool is_master);
// True when print() without force prints on this rank.
bool print_enabled();

namespace detail {
void write_stdout_line(const std::string& line);

template <typename... Args>
std::string print_line(const Args&... args) {
  std::ostringstream out;
  out << std::boolalpha;
  bool first = true;
  ((out << (first ? "" : " ") << args, first = false), ...);
  out << '\n';
  return out.str();
}
}  // namespace detail

template <typename... Args>
void print(ForcePrint, const Args&... args) {
  detail::write_stdout_line(detail::print_line(args...));
}

template <typename... Args>
void print(const Args&... args) {
  if (print_enabled()) detail::write_stdout_line(detail::print_line(args...));
}

}  // namespace collie
