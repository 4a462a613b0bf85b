// parse_duration and the samples' --timeout / COLLIE_TIMEOUT knob: units,
// refusals that name the flag or variable, and no overflow.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "collie/base/error.h"
#include "collie/base/parse_duration.h"

using namespace collie;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

// The message of the InvalidArgument that `f` throws ("" when it throws none).
template <typename F>
std::string invalid_argument_message(F f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("parse_duration reads seconds, ms, s, m, min and h, with decimals") {
  CHECK(parse_duration("90", "--timeout") == 90s);
  CHECK(parse_duration("90s", "--timeout") == 90s);
  CHECK(parse_duration("1500ms", "--timeout") == 1500ms);
  CHECK(parse_duration("5m", "--timeout") == 5min);
  CHECK(parse_duration("5min", "--timeout") == 5min);
  CHECK(parse_duration("1.5h", "--timeout") == 90min);
  CHECK(parse_duration("0.25s", "--timeout") == 250ms);
  CHECK(parse_duration("0", "--timeout") == 0ms);
  CHECK(parse_duration("8760h", "--timeout") == kMaxParsedDuration);
}

TEST_CASE("parse_duration refuses garbage, negatives and overflow, naming the flag") {
  for (const char* bad : {"", "s", "-5", "5x", "1.2.3s", " 5", "5 s", "abc", "5sec"}) {
    INFO(bad);
    CHECK_THAT(invalid_argument_message([&] { parse_duration(bad, "--timeout"); }),
               Contains(std::string("--timeout '") + bad + "'"));
  }
  // Would wrap a 64-bit nanosecond count if it were accepted.
  CHECK_THAT(invalid_argument_message([] { parse_duration("3000000h", "--rdzv-timeout"); }),
             Contains("--rdzv-timeout '3000000h'") && Contains("longer than the limit"));
  CHECK_THROWS_AS(parse_duration("8761h", "--timeout"), InvalidArgument);
  CHECK_THROWS_AS(parse_duration(std::string(400, '9'), "--timeout"), InvalidArgument);
}

TEST_CASE("timeout_from_flag_or_env: the flag, else COLLIE_TIMEOUT, else unset; zero refused") {
  ::unsetenv("COLLIE_TIMEOUT");
  CHECK(timeout_from_flag_or_env("") == kUnsetTimeout);
  CHECK(timeout_from_flag_or_env("2s") == 2s);
  ::setenv("COLLIE_TIMEOUT", "5m", 1);
  CHECK(timeout_from_flag_or_env("") == 5min);
  CHECK(timeout_from_flag_or_env("2s") == 2s);  // the flag wins
  ::setenv("COLLIE_TIMEOUT", "soon", 1);
  CHECK_THAT(invalid_argument_message([] { timeout_from_flag_or_env(""); }),
             Contains("COLLIE_TIMEOUT 'soon'"));
  ::unsetenv("COLLIE_TIMEOUT");
  CHECK_THAT(invalid_argument_message([] { timeout_from_flag_or_env("0s"); }),
             Contains("--timeout '0s'") && Contains("at least 1ms"));
  CHECK_THROWS_AS(timeout_from_flag_or_env("0.1ms"), InvalidArgument);  // rounds to 0
}
