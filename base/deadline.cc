#include "collie/base/deadline.h"

#include <cstdio>

#include "collie/base/str_cat.h"

namespace collie {

std::string format_duration(std::chrono::nanoseconds d) {
  using namespace std::chrono;
  const double ns = static_cast<double>(d.count());
  char buf[64];
  if (ns < 1e3) {
    std::snprintf(buf, sizeof buf, "%.0fns", ns);
  } else if (ns < 1e6) {
    std::snprintf(buf, sizeof buf, "%.1fus", ns / 1e3);
  } else if (ns < 1e9) {
    std::snprintf(buf, sizeof buf, "%.1fms", ns / 1e6);
  } else if (ns < 120e9) {
    std::snprintf(buf, sizeof buf, "%.2fs", ns / 1e9);
  } else {
    std::snprintf(buf, sizeof buf, "%.1fmin", ns / 60e9);
  }
  return buf;
}

std::string Deadline::describe() const {
  return str_cat("after ", format_duration(elapsed()), " (limit ", format_duration(limit_), ")");
}

}  // namespace collie
