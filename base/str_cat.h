// str_cat: concatenates anything that has an operator<< into one string.
// Error messages are built with it so that they read as sentences.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace collie {

template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// Joins a range with a separator: join(ranks, ", ") -> "1, 3, 4".
template <typename Range>
std::string join(const Range& range, std::string_view sep) {
  std::ostringstream out;
  bool first = true;
  for (const auto& item : range) {
    if (!first) out << sep;
    out << item;
    first = false;
  }
  return out.str();
}

}  // namespace collie
