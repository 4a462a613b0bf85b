// SmallVector: inline up to N, then on the heap, with the elements intact
// across growth, copies and moves either way.
#include <catch2/catch.hpp>

#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "collie/base/small_vector.h"

using namespace collie;

namespace {

struct Part {
  const void* data = nullptr;
  size_t bytes = 7;  // a member initializer: the inline storage must not need it
};

template <size_t N>
std::vector<int> contents(const SmallVector<int, N>& v) {
  return {v.begin(), v.end()};
}

std::vector<int> iota(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 1);
  return v;
}

}  // namespace

TEST_CASE("SmallVector keeps N elements inline and moves to the heap past them") {
  SmallVector<int, 4> v;
  CHECK(v.empty());
  for (int i = 1; i <= 4; ++i) v.push_back(i);
  CHECK(v.is_inline());
  CHECK(contents(v) == iota(4));
  for (int i = 5; i <= 37; ++i) v.push_back(i);
  CHECK_FALSE(v.is_inline());
  CHECK(v.size() == 37);
  CHECK(contents(v) == iota(37));
  std::span<const int> s = std::as_const(v);
  CHECK(s.size() == 37);
  CHECK(s[36] == 37);
  v.clear();
  CHECK(v.empty());
  v.push_back(9);
  CHECK(contents(v) == std::vector<int>{9});
}

TEST_CASE("SmallVector copies and moves keep the elements, inline or not") {
  for (int n : {0, 3, 8, 9, 40}) {
    CAPTURE(n);
    const std::vector<int> want = iota(n);
    SmallVector<int, 8> a(want.begin(), want.end());
    CHECK(a.is_inline() == (n <= 8));

    SmallVector<int, 8> copy(a);
    CHECK(contents(copy) == want);
    CHECK(contents(a) == want);  // the source is untouched
    if (n > 0) copy[0] = -1;
    CHECK(contents(a) == want);  // and does not share storage

    SmallVector<int, 8> assigned;
    for (int i = 0; i < 20; ++i) assigned.push_back(100 + i);  // a heap buffer to replace
    assigned = a;
    CHECK(contents(assigned) == want);

    SmallVector<int, 8> moved(std::move(copy));
    SmallVector<int, 8> expected_after_edit(a);
    if (n > 0) expected_after_edit[0] = -1;
    CHECK(contents(moved) == contents(expected_after_edit));
    CHECK(copy.empty());  // NOLINT(bugprone-use-after-move): a moved-from one is empty

    SmallVector<int, 8> move_assigned;
    move_assigned.push_back(5);
    move_assigned = std::move(assigned);
    CHECK(contents(move_assigned) == want);
    CHECK(assigned.empty());  // NOLINT(bugprone-use-after-move)
    assigned.push_back(1);    // and usable again
    CHECK(contents(assigned) == std::vector<int>{1});
  }
}

TEST_CASE("SmallVector of views: no element is constructed until pushed") {
  SmallVector<Part> parts;
  int a = 0, b = 0;
  parts.push_back(Part{&a, 4});
  parts.push_back(Part{&b, 8});
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].data == &a);
  CHECK(parts[1].bytes == 8);
  // Captured by value into a lambda, as the process group's ops do.
  auto f = [copy = parts] { return copy[1].data; };
  CHECK(f() == &b);
}
