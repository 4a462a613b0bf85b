// DistributedSampler against torch.utils.data.DistributedSampler: the index
// lists come from torch at test time for a sweep of arguments and must be
// identical, element for element.
#include <catch2/catch.hpp>

#include <numeric>
#include <set>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/nn/distributed_sampler.h"
#include "collie/test/nn/torch_helper.h"

using namespace collie;
using namespace collie::nn;

namespace {

struct Args {
  size_t len;
  int replicas;
  bool shuffle;
  uint64_t seed;
  uint64_t epoch;
  bool drop_last;
};

std::vector<Args> sweep() {
  std::vector<Args> out;
  for (size_t len : {0, 1, 2, 5, 7, 10, 17, 64, 100, 1001})
    for (int replicas : {1, 2, 3, 4, 8})
      for (bool shuffle : {false, true})
        for (bool drop_last : {false, true}) {
          if (!shuffle) {
            out.push_back({len, replicas, false, 0, 0, drop_last});
            continue;
          }
          out.push_back({len, replicas, true, 0, 0, drop_last});
          out.push_back({len, replicas, true, 42, 3, drop_last});
          // seed + epoch past 2^32: torch keeps the low 32 bits.
          out.push_back({len, replicas, true, (uint64_t(1) << 32) + 5, 1, drop_last});
        }
  return out;
}

}  // namespace

TEST_CASE("DistributedSampler is bit-identical to torch's for every rank") {
  const auto cases = sweep();
  std::string script = R"(
import torch
from torch.utils.data import DistributedSampler
class Len:
    def __init__(self, n): self.n = n
    def __len__(self): return self.n
def emit(n, r, shuffle, seed, epoch, drop_last):
    for rank in range(r):
        s = DistributedSampler(Len(n), num_replicas=r, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        s.set_epoch(epoch)
        idx = list(iter(s))
        assert len(idx) == len(s)
        print(len(s), *idx)
)";
  for (const auto& a : cases)
    script += str_cat("emit(", a.len, ", ", a.replicas, ", ", a.shuffle ? "True" : "False", ", ",
                      a.seed, ", ", a.epoch, ", ", a.drop_last ? "True" : "False", ")\n");
  auto out = test::run_torch(script);
  auto rows = test::parse_int_rows(out);
  size_t row = 0;
  for (const auto& a : cases) {
    for (int rank = 0; rank < a.replicas; ++rank, ++row) {
      INFO("len " << a.len << " replicas " << a.replicas << " rank " << rank << " shuffle "
                  << a.shuffle << " seed " << a.seed << " epoch " << a.epoch << " drop_last "
                  << a.drop_last);
      REQUIRE(row < rows.size());
      DistributedSampler s(a.len, a.replicas, rank, a.shuffle, a.seed, a.drop_last);
      s.set_epoch(a.epoch);
      std::vector<int64_t> expected(rows[row].begin() + 1, rows[row].end());
      CHECK(s.size() == static_cast<size_t>(rows[row][0]));
      CHECK(s.indices() == expected);
    }
  }
  CHECK(row == rows.size());
}

TEST_CASE("randperm matches torch for a permutation larger than 2^24") {
  // A checksum instead of 17M numbers: position-weighted sum and the head.
  const int64_t n = (int64_t(1) << 24) + 3;
  auto out = test::run_torch(str_cat(R"(
import torch
g = torch.Generator(); g.manual_seed(7)
p = torch.randperm()",
                                     n, R"(, generator=g)
print(int((p * torch.arange()",
                                     n, R"()).sum()), *p[:8].tolist(), *p[-4:].tolist())
)"));
  auto row = test::parse_int_rows(out).at(0);
  Generator g(7);
  auto p = randperm(n, g);
  int64_t weighted = 0;  // wraps like torch's int64 sum
  for (int64_t i = 0; i < n; ++i)
    weighted =
        static_cast<int64_t>(static_cast<uint64_t>(weighted) + static_cast<uint64_t>(p[i] * i));
  CHECK(weighted == row[0]);
  for (int i = 0; i < 8; ++i) CHECK(p[i] == row[1 + i]);
  for (int i = 0; i < 4; ++i) CHECK(p[n - 4 + i] == row[9 + i]);
}

TEST_CASE("DistributedSampler partitions, pads and validates like torch") {
  // Every index appears across ranks; padding repeats from the start.
  std::multiset<int64_t> seen;
  for (int r = 0; r < 4; ++r) {
    DistributedSampler s(10, 4, r, true, 1);
    s.set_epoch(2);
    CHECK(s.size() == 3);
    for (auto i : s.indices()) seen.insert(i);
  }
  CHECK(seen.size() == 12);
  for (int64_t i = 0; i < 10; ++i) CHECK(seen.count(i) >= 1);
  // Different epochs give different orders, the same epoch the same one.
  DistributedSampler s(100, 1, 0);
  s.set_epoch(0);
  auto e0 = s.indices();
  s.set_epoch(1);
  CHECK(s.indices() != e0);
  s.set_epoch(0);
  CHECK(s.indices() == e0);
  // Padding beyond the dataset length repeats it several times.
  DistributedSampler tiny(2, 5, 4, false);
  CHECK(tiny.indices() == std::vector<int64_t>{0});
  CHECK_THROWS_AS(DistributedSampler(10, 0, 0), InvalidArgument);
  CHECK_THROWS_AS(DistributedSampler(10, 2, 2), InvalidArgument);
  CHECK_THROWS_WITH(DistributedSampler(10, 2, -1), Catch::Contains("Invalid rank -1"));
}
