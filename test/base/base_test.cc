// Tests of base/: checks, deadlines, dtype helpers, half conversions
// and logging.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "collie/base/check.h"
#include "collie/base/deadline.h"
#include "collie/base/half.h"
#include "collie/base/logging.h"
#include "collie/base/types.h"
#include "collie/test/support/child.h"
#include "collie/test/support/subprocess.h"

using namespace collie;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using Catch::Matchers::StartsWith;

TEST_CASE("COLLIE_CHECK_EQ prints both operands, the message and the place") {
  int recv_count = 12, count = 16;
  try {
    COLLIE_CHECK_EQ(recv_count, count, "from rank ", 3);
    FAIL("no throw");
  } catch (const InvalidArgument&) {
    FAIL("internal checks must not throw InvalidArgument");
  } catch (const Error& e) {
    std::string m = e.what();
    CHECK_THAT(m, Contains("recv_count == count"));
    CHECK_THAT(m, Contains("(12 vs. 16)"));
    CHECK_THAT(m, Contains("from rank 3"));
    CHECK_THAT(m, Contains("base_test.cc:"));
  }
  CHECK_NOTHROW([] { COLLIE_CHECK_LT(1, 2); }());
  CHECK_THROWS_AS([] { COLLIE_CHECK(1 + 1 == 3, "arithmetic"); }(), Error);
}

TEST_CASE("COLLIE_ARG_CHECK throws InvalidArgument with the caller's text and no source path") {
  CHECK_THROWS_AS([] { COLLIE_ARG_CHECK_GE(-1, 0, "rank"); }(), InvalidArgument);
  CHECK_THROWS_WITH([] { COLLIE_ARG_CHECK_GE(-1, 0, "rank"); }(),
                    Equals("rank (expected -1 >= 0, got -1 vs. 0)"));
  CHECK_THROWS_WITH([] { COLLIE_ARG_CHECK(1 > 2, "group size ", 3, " is odd"); }(),
                    Equals("group size 3 is odd"));
  CHECK_THROWS_WITH([] { COLLIE_ARG_CHECK(1 > 2); }(), Equals("invalid argument: expected 1 > 2"));
}

TEST_CASE("COLLIE_CHECK names the place relative to the source root") {
  CHECK_THROWS_WITH([] { COLLIE_CHECK_EQ(1, 2, "x"); }(),
                    StartsWith("Check failed: 1 == 2 (1 vs. 2): x [test/base/base_test.cc:"));
}

TEST_CASE("Deadline resolves the one sentinel to the default and counts down") {
  CHECK(resolve_timeout(kUnsetTimeout) == kDefaultTimeout);
  CHECK(resolve_timeout(std::chrono::seconds(3)) == std::chrono::seconds(3));
  CHECK(resolve_timeout(kUnsetTimeout, std::chrono::seconds(5)) == std::chrono::seconds(5));
  Deadline unset;
  CHECK(unset.limit() == kDefaultTimeout);
  Deadline zero(Timeout(0));
  CHECK(zero.expired());
  CHECK(zero.remaining().count() == 0);
  Deadline d(std::chrono::seconds(10));
  CHECK_FALSE(d.expired());
  CHECK(d.remaining() <= std::chrono::seconds(10));
  CHECK(d.remaining() > std::chrono::seconds(9));
  CHECK_THAT(d.describe(), Contains("limit 10.00s"));
  CHECK(format_duration(std::chrono::minutes(30)) == "30.0min");
  CHECK(format_duration(std::chrono::microseconds(1500)) == "1.5ms");
}

TEST_CASE("DataType sizes, names and parsing round-trip") {
  for (int i = 0; i < kNumDataTypes; ++i) {
    auto dt = static_cast<DataType>(i);
    CHECK(is_valid(dt));
    CHECK(element_size(dt) > 0);
    auto parsed = parse_data_type(to_string(dt));
    REQUIRE(parsed);
    CHECK(*parsed == dt);
  }
  CHECK_FALSE(is_valid(static_cast<DataType>(kNumDataTypes)));
  CHECK_FALSE(parse_data_type("complex64"));
  CHECK(element_size(DataType::kBFloat16) == 2);
  for (int i = 0; i < kNumReduceOps; ++i) {
    auto op = static_cast<ReduceOp>(i);
    auto parsed = parse_reduce_op(to_string(op));
    REQUIRE(parsed);
    CHECK(*parsed == op);
  }
  CHECK_FALSE(is_valid(static_cast<ReduceOp>(200)));
  std::vector<double> v(5);
  TensorView t = view(v.data(), v.size());
  CHECK(t.dtype == DataType::kFloat64);
  CHECK(t.nbytes() == 40);
  CHECK(to_string(Device::cuda(1)) == "cuda:1");
}

TEST_CASE("visit_dtype hands every dtype its C++ type; reductions refuse what they cannot do") {
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto dt = static_cast<DataType>(i);
    visit_dtype(dt, [&]<typename T>(TypeTag<T>) {
      CHECK(sizeof(T) == element_size(dt));
      CHECK(data_type_of<T>() == dt);
      // The inline tables agree with the C++ type.
      CHECK(is_floating_point(dt) == (std::is_floating_point_v<T> || is_half_type_v<T>));
      CHECK(is_integral(dt) == std::is_integral_v<T>);
      for (int o = 0; o < kNumReduceOps; ++o) {
        const auto op = static_cast<ReduceOp>(o);
        const bool bitwise = op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
        const bool expected = op == ReduceOp::kAvg ? !std::is_integral_v<T>
                              : bitwise            ? std::is_integral_v<T>
                                                   : true;
        CHECK(reduction_supported(op, dt) == expected);
        CHECK(unsupported_reduction(op, dt).empty() == expected);
      }
      CHECK(to_double(from_double<T>(1.0)) == 1.0);
    });
  }
  CHECK_THROWS_AS(visit_dtype(static_cast<DataType>(99), [](auto) {}), InvalidArgument);
  // Values off the wire outside the enums: no size, no reduction, and the
  // tables are not read past their end.
  for (int bad : {kNumDataTypes, 31, 32, 200, 255}) {
    const auto dt = static_cast<DataType>(bad);
    CHECK(element_size(dt) == 0);
    CHECK_FALSE(is_floating_point(dt));
    CHECK_FALSE(is_integral(dt));
    CHECK_FALSE(reduction_supported(ReduceOp::kSum, dt));
    CHECK_THAT(unsupported_reduction(ReduceOp::kSum, dt), Contains("unknown dtype"));
  }
  CHECK_FALSE(reduction_supported(static_cast<ReduceOp>(kNumReduceOps), DataType::kFloat32));
  CHECK(is_integral(DataType::kBool));
  CHECK(is_integral(DataType::kInt8));
  CHECK_FALSE(is_integral(DataType::kBFloat16));
  CHECK(unsupported_reduction(ReduceOp::kBxor, DataType::kInt64).empty());
  CHECK(unsupported_reduction(ReduceOp::kMax, DataType::kBool).empty());
  CHECK_THAT(unsupported_reduction(ReduceOp::kBand, DataType::kFloat32),
             Contains("ReduceOp band is not defined for float32"));
  CHECK_THAT(unsupported_reduction(ReduceOp::kAvg, DataType::kInt8),
             Contains("ReduceOp avg is not defined for int8"));
  // bool: sum and max are or, product and min are and; ints wrap.
  CHECK(reduce_value(ReduceOp::kSum, true, true) == true);
  CHECK(reduce_value(ReduceOp::kProduct, true, false) == false);
  CHECK(reduce_value(ReduceOp::kBxor, true, true) == false);
  CHECK(reduce_value<int8_t>(ReduceOp::kSum, 100, 100) == static_cast<int8_t>(-56));
  CHECK(reduce_value<uint8_t>(ReduceOp::kBxor, 0x0f, 0xff) == 0xf0);
  CHECK(parse_data_type("bool") == DataType::kBool);
  CHECK(parse_reduce_op("BXOR") == ReduceOp::kBxor);
}

TEST_CASE("float16 conversion is exact on every half value and rounds to nearest even") {
  // Every finite half round-trips through float exactly.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    Half h{static_cast<uint16_t>(bits)};
    float f = to_float(h);
    if (std::isnan(f)) {
      CHECK(std::isnan(to_float(to_half(f))));
      continue;
    }
    INFO("bits " << bits);
    REQUIRE(to_half(f).bits == h.bits);
  }
  CHECK(to_float(to_half(65504.0f)) == 65504.0f);
  CHECK(std::isinf(to_float(to_half(65520.0f))));
  CHECK(to_float(to_half(65519.0f)) == 65504.0f);
  // Ties go to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  CHECK(to_float(to_half(1.0f + std::ldexp(1.0f, -11))) == 1.0f);
  CHECK(to_float(to_half(1.0f + 3 * std::ldexp(1.0f, -11))) == 1.0f + 2 * std::ldexp(1.0f, -10));
  // Smallest subnormal and half of it (ties to zero).
  CHECK(to_float(to_half(std::ldexp(1.0f, -24))) == std::ldexp(1.0f, -24));
  CHECK(to_float(to_half(std::ldexp(1.0f, -25))) == 0.0f);
  CHECK(to_float(to_half(std::ldexp(1.5f, -25))) == std::ldexp(1.0f, -24));
}

TEST_CASE("bfloat16 conversion rounds to nearest even and keeps NaN") {
  for (uint32_t bits = 0; bits < 0x10000; bits += 7) {
    BFloat16 b{static_cast<uint16_t>(bits)};
    float f = to_float(b);
    if (std::isnan(f)) continue;
    REQUIRE(to_bfloat16(f).bits == b.bits);
  }
  CHECK(to_float(to_bfloat16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);  // tie to even
  CHECK(to_float(to_bfloat16(1.0f + 3 * std::ldexp(1.0f, -8))) == 1.0f + std::ldexp(1.0f, -6));
  CHECK(std::isnan(to_float(to_bfloat16(std::numeric_limits<float>::quiet_NaN()))));
}

COLLIE_TEST_CHILD(log_lines) {
  set_log_rank(std::stoi(args.at(0)));
  COLLIE_LOG(kInfo) << "hello " << 42;
  COLLIE_LOG(kDebug) << "hidden at INFO";
  COLLIE_LOG(kError) << "bad thing";
  return 0;
}

TEST_CASE("logging is rank-prefixed, goes to stderr and obeys COLLIE_LOG_LEVEL") {
  using test::Subprocess;
  auto p = Subprocess::spawn(test::child_argv("log_lines", {"3"}),
                             {.env = {{"COLLIE_LOG_LEVEL", "info"}}});
  REQUIRE(p.wait(std::chrono::seconds(30)).ok());
  std::string err = p.err();
  CHECK_THAT(err, Contains("[collie rank 3] I "));
  CHECK_THAT(err, Contains("hello 42"));
  CHECK_THAT(err, Contains("[collie rank 3] E "));
  CHECK(err.find("hidden") == std::string::npos);
  CHECK(p.out().empty());

  auto q = Subprocess::spawn(test::child_argv("log_lines", {"0"}),
                             {.env = {{"COLLIE_LOG_LEVEL", "error"}}});
  REQUIRE(q.wait(std::chrono::seconds(30)).ok());
  CHECK(q.err().find("hello") == std::string::npos);
  CHECK_THAT(q.err(), Contains("bad thing"));
  CHECK_THROWS_AS(parse_log_level("loud"), InvalidArgument);
}
