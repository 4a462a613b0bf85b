// Durations typed by people, in flags and environment variables:
//
//   parse_duration("90", "--timeout")      90 s (a bare number is seconds)
//   parse_duration("1500ms", "--timeout")  1.5 s; also "90s", "5m", "1.5h"
//
// and the samples' timeout knob: --timeout when given, else COLLIE_TIMEOUT,
// else the 30-minute default. Text that is not a duration, is negative, or
// is longer than kMaxParsedDuration throws InvalidArgument naming the flag
// (or variable) and the text, never wraps or silently becomes something else.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "collie/base/deadline.h"

namespace collie {

// The longest duration accepted: a year. Longer ones are typos, and a year
// from now still fits the clock's nanosecond count with room to spare.
inline constexpr Timeout kMaxParsedDuration = std::chrono::hours(24 * 365);

// A non-negative decimal number with an optional unit: ms, s, m (or min), h;
// no unit means seconds. Rounded down to whole milliseconds.
Timeout parse_duration(std::string_view text, std::string_view what);

// `flag_value` parsed as `flag` when non-empty, else COLLIE_TIMEOUT when set,
// else kUnsetTimeout (the callee's default, 30 minutes). Zero is refused:
// nothing could finish in it.
Timeout timeout_from_flag_or_env(std::string_view flag_value, std::string_view flag = "--timeout");

}  // namespace collie
