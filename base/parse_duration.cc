#include "collie/base/parse_duration.h"

#include <cstdlib>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie {

namespace {

constexpr const char* kExamples = "e.g. 90, 90s, 1500ms, 5m, 1.5h";

// Milliseconds per unit; 0 for an unknown one.
double unit_ms(std::string_view unit) {
  if (unit.empty() || unit == "s") return 1e3;
  if (unit == "ms") return 1;
  if (unit == "m" || unit == "min") return 60e3;
  if (unit == "h") return 3600e3;
  return 0;
}

}  // namespace

Timeout parse_duration(std::string_view text, std::string_view what) {
  // The number: digits with at most one '.', at least one digit.
  size_t end = 0, digits = 0, dots = 0;
  for (; end < text.size(); ++end) {
    const char c = text[end];
    if (c >= '0' && c <= '9')
      ++digits;
    else if (c == '.')
      ++dots;
    else
      break;
  }
  if (digits == 0 || dots > 1)
    throw InvalidArgument(str_cat(what, " '", text, "' is not a duration (", kExamples, ")"));
  const std::string_view unit = text.substr(end);
  const double scale = unit_ms(unit);
  if (scale == 0)
    throw InvalidArgument(str_cat(what, " '", text, "': unknown unit '", unit,
                                  "' (use ms, s, m or h; ", kExamples, ")"));
  // strtod of at most a few hundred digits is exact enough: the limit check
  // below is what matters, and it runs on the double, before any conversion.
  const double ms = std::strtod(std::string(text.substr(0, end)).c_str(), nullptr) * scale;
  if (!(ms <= static_cast<double>(kMaxParsedDuration.count())))
    throw InvalidArgument(str_cat(what, " '", text, "' is longer than the limit of ",
                                  kMaxParsedDuration.count() / 3600000, "h"));
  return Timeout(static_cast<Timeout::rep>(ms));
}

Timeout timeout_from_flag_or_env(std::string_view flag_value, std::string_view flag) {
  std::string_view text = flag_value, what = flag;
  if (text.empty()) {
    const char* env = std::getenv("COLLIE_TIMEOUT");
    if (env == nullptr) return kUnsetTimeout;
    text = env;
    what = "COLLIE_TIMEOUT";
  }
  const Timeout timeout = parse_duration(text, what);
  if (timeout <= Timeout::zero())
    throw InvalidArgument(
        str_cat(what, " '", text, "' is no time at all: a timeout must be at least 1ms"));
  return timeout;
}

}  // namespace collie
