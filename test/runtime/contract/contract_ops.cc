#include "collie/test/runtime/contract/contract_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/test/runtime/contract/buffers.h"
#include "collie/test/support/reference.h"

namespace collie::test {

std::string ContractBackend::refuses(ReduceOp op, DataType dtype) const {
  if (name != "nccl") return "";
  const bool bitwise = op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
  if (bitwise && !(dtype == DataType::kBool && op != ReduceOp::kBxor))
    return "NCCL has no bitwise reductions";
  return "";
}

ContractBackend contract_backend() {
  const char* env = std::getenv("COLLIE_CONTRACT_BACKEND");
  const std::string name = env != nullptr && *env != '\0' ? env : "cpu";
  if (name == "cpu" || name == "cpu:tcp" || name == "cpu:shm")
    return ContractBackend{"cpu " + (name.size() > 4 ? name.substr(4) : std::string("auto")), "cpu",
                           name.size() > 4 ? name.substr(4) : ""};
  if (name == "nccl") {
    // NCCL serves the device buffers; the per-device group gives the object
    // collectives (host bytes) to the cpu backend, as torch 2.x would.
    ContractBackend b{"nccl", "cpu:cpu,cuda:nccl"};
    b.on_gpu = true;
    b.any_source = false;
    b.tag_matching = false;
    b.early_receives = false;
    b.exact_avg = false;
    return b;
  }
  throw InvalidArgument(
      str_cat("COLLIE_CONTRACT_BACKEND=\"", name, "\": expected cpu, cpu:tcp, cpu:shm or nccl"));
}

namespace {

// Above 32 KiB the shared-memory algorithms read peers' buffers directly
// (CMA) and the TCP ring pipelines several segments: 40,000 float32 is
// 160 KB.
constexpr size_t kLargeCount = 40000;

std::vector<uint8_t> concat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The bytes of elements [offset, offset + count).
std::vector<uint8_t> slice(const std::vector<uint8_t>& bytes, DataType dtype, size_t offset,
                           size_t count) {
  const size_t es = element_size(dtype);
  return {bytes.begin() + static_cast<ptrdiff_t>(offset * es),
          bytes.begin() + static_cast<ptrdiff_t>((offset + count) * es)};
}

// Within `ulps` units in the last place of the expected value (the NCCL
// average); exact for everything else.
std::string compare_within(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                           DataType dtype, int ulps) {
  if (got.size() != want.size()) return str_cat("size ", got.size(), " vs. ", want.size());
  const int mantissa = dtype == DataType::kFloat64    ? 52
                       : dtype == DataType::kFloat32  ? 23
                       : dtype == DataType::kFloat16  ? 10
                       : dtype == DataType::kBFloat16 ? 7
                                                      : 0;
  const size_t es = element_size(dtype);
  for (size_t i = 0; i < got.size() / es; ++i) {
    double g = 0, w = 0;
    visit_dtype(dtype, [&]<typename T>(TypeTag<T>) {
      T gv, wv;
      std::memcpy(&gv, got.data() + i * es, es);
      std::memcpy(&wv, want.data() + i * es, es);
      g = to_double(gv);
      w = to_double(wv);
    });
    const double ulp = std::ldexp(std::max(std::abs(w), 1.0), -mantissa);
    if (std::abs(g - w) > ulps * ulp)
      return str_cat("element ", i, " of ", got.size() / es, ": ", g, " vs. expected ", w,
                     " (allowed ", ulps, " ulps)");
  }
  return "";
}

std::vector<uint8_t> filler(DataType dtype, size_t count) {
  // Output buffers start as a pattern no result has (and a valid bool: 1).
  if (dtype == DataType::kBool) return std::vector<uint8_t>(count, 1);
  return std::vector<uint8_t>(count * element_size(dtype), 0xab);
}

class Matrix {
 public:
  Matrix(ProcessGroup& pg, const ContractBackend& backend, const MatrixOptions& options)
      : pg_(pg), b_(backend), o_(options), P_(pg.size()), r_(pg.rank()) {}

  uint64_t run() {
    for (DataType dt : dtypes()) {
      for (ReduceOp op : ops()) {
        if (!unsupported_reduction(op, dt).empty()) {
          refused_everywhere(dt, op);
          continue;
        }
        for (size_t n : counts(dt)) reductions(dt, op, n);
      }
      for (size_t n : counts(dt)) data_movement(dt, n);
      if (P_ > 1) point_to_point(dt);
    }
    call("barrier", [&](bool async) { return pg_.barrier(BarrierOptions{kUnsetTimeout, async}); });
    pg_.monitored_barrier(MonitoredBarrierOptions{std::chrono::seconds(60), true});
    return calls_ + 1;
  }

 private:
  std::vector<DataType> dtypes() const {
    if (!o_.dtypes.empty()) return o_.dtypes;
    return {std::begin(kAllDtypes), std::end(kAllDtypes)};
  }
  std::vector<ReduceOp> ops() const {
    if (!o_.ops.empty()) return o_.ops;
    return {std::begin(kAllOps), std::end(kAllOps)};
  }
  // Zero, one, one more than the group (uneven ring chunks), an odd count
  // past the small-message paths, and for a few dtypes a large one.
  std::vector<size_t> counts(DataType dt) const {
    std::vector<size_t> c{0, 1, static_cast<size_t>(P_) + 1, 1031};
    if (o_.large && (dt == DataType::kFloat32 || dt == DataType::kBFloat16 ||
                     dt == DataType::kInt64 || dt == DataType::kBool))
      c.push_back(kLargeCount);
    return c;
  }

  Buffer buffer(const std::vector<uint8_t>& bytes, DataType dt) {
    return Buffer(bytes, dt, b_.on_gpu);
  }

  std::string where(const std::string& what) const {
    return str_cat(what, " [", b_.name, ", rank ", r_, " of ", P_, ", ", o_.label, "]");
  }

  // Issues one op, alternately as async_op (the Work waited on here) and
  // blocking, so both paths are in the matrix (runtime/process_group/work.h
  // states what each promises). An op with no blocking form
  // (batch_isend_irecv) is always async.
  //  * blocking, host work: the Work returned is complete and a success;
  //  * blocking, device work: the caller's stream is ordered after the op,
  //    which the result's read-back (on that stream, no device-wide sync)
  //    checks; the Work holds no error;
  //  * async: after wait() the Work is complete and a success.
  void call(const std::string& what, const std::function<std::shared_ptr<Work>(bool)>& issue,
            bool has_blocking_form = true) {
    const bool async = !has_blocking_form || (calls_++ % 2) == 1;
    try {
      auto work = issue(async);
      if (!work) throw std::runtime_error("the backend returned no Work");
      if (!async && b_.on_gpu) {
        if (auto e = work->exception()) std::rethrow_exception(e);
        return;
      }
      if (!async && !work->is_completed())
        throw std::runtime_error("a blocking call returned a Work that is not complete");
      work->wait();
      if (!work->is_completed() || !work->is_success()) {
        std::string cause = "no error stored";
        if (auto e = work->exception()) try {
            std::rethrow_exception(e);
          } catch (const std::exception& x) {
            cause = x.what();
          }
        throw std::runtime_error(str_cat("after wait() returned the Work is ",
                                         work->is_completed() ? "complete" : "not complete",
                                         " but not a success (", cause, ")"));
      }
    } catch (const std::exception& e) {
      throw std::runtime_error(where(str_cat(what, ": ", e.what())));
    }
  }

  void expect(const std::string& what, const std::vector<uint8_t>& got,
              const std::vector<uint8_t>& want, DataType dt, bool approximate = false) {
    const std::string diff =
        approximate ? compare_within(got, want, dt, P_) : compare(got, want, dt);
    if (!diff.empty()) throw std::runtime_error(where(str_cat(what, ": ", diff)));
  }

  // A reduction the backend cannot do is refused where it was called, with
  // InvalidArgument naming the op and the dtype, and the buffer untouched.
  void expect_refusal(const std::string& what, DataType dt, ReduceOp op,
                      const std::function<void()>& issue) {
    try {
      issue();
    } catch (const InvalidArgument& e) {
      const std::string msg = e.what();
      if (msg.find(to_string(op)) == std::string::npos ||
          msg.find(to_string(dt)) == std::string::npos ||
          msg.find(str_cat("rank ", r_)) == std::string::npos)
        throw std::runtime_error(
            where(str_cat(what, ": the refusal does not name op, dtype and rank: ", msg)));
      return;
    }
    throw std::runtime_error(where(str_cat(what, ": ", op, " on ", dt, " was not refused")));
  }

  // Every reducing op refuses a pair no backend supports (AVG on an
  // integer, a bitwise op on a float), on every rank, before sending.
  void refused_everywhere(DataType dt, ReduceOp op) {
    const auto data = make_data(dt, 3 * static_cast<size_t>(P_), r_, ReduceOp::kSum);
    Buffer t = buffer(data, dt);
    Buffer out = buffer(filler(dt, 3), dt);
    const std::string what = str_cat(op, " on ", dt);
    expect_refusal("all_reduce " + what, dt, op, [&] { pg_.all_reduce(t.view(), {.op = op}); });
    expect_refusal("reduce " + what, dt, op, [&] { pg_.reduce(t.view(), {.op = op}); });
    expect_refusal("reduce_scatter " + what, dt, op,
                   [&] { pg_.reduce_scatter(out.view(), t.view(), {.op = op}); });
    expect("refused calls left the buffer", t.read(), data, dt);
  }

  void reductions(DataType dt, ReduceOp op, size_t n) {
    const std::string tag = str_cat(dt, " ", op, " n=", n);
    const auto in = make_data(dt, n, r_, op);
    const auto want = reference_reduce(dt, op, P_, n);
    const bool approx = op == ReduceOp::kAvg && !b_.exact_avg;
    if (const std::string why = b_.refuses(op, dt); !why.empty()) {
      Buffer t = buffer(in, dt);
      expect_refusal("all_reduce " + tag, dt, op, [&] { pg_.all_reduce(t.view(), {.op = op}); });
      expect("refused all_reduce left the buffer " + tag, t.read(), in, dt);
      return;
    }
    {
      Buffer t = buffer(in, dt);
      call("all_reduce " + tag, [&](bool async) {
        return pg_.all_reduce(t.view(), AllReduceOptions{op, kUnsetTimeout, async});
      });
      expect("all_reduce " + tag, t.read(), want, dt, approx);
    }
    {
      const int root = static_cast<int>((n + static_cast<size_t>(op)) % static_cast<size_t>(P_));
      Buffer t = buffer(in, dt);
      call(str_cat("reduce to ", root, " ", tag), [&](bool async) {
        return pg_.reduce(t.view(), ReduceOptions{op, root, kUnsetTimeout, async});
      });
      expect(str_cat("reduce to ", root, " ", tag), t.read(), r_ == root ? want : in, dt,
             approx && r_ == root);
    }
    // reduce_scatter: rank r gets the reduction of every rank's slot r.
    const size_t total = static_cast<size_t>(P_) * n;
    const auto big = make_data(dt, total, r_, op);
    const auto mine = reference_reduce(dt, op, P_, n, static_cast<size_t>(r_) * n);
    {
      Buffer input = buffer(big, dt), output = buffer(filler(dt, n), dt);
      call("reduce_scatter " + tag, [&](bool async) {
        return pg_.reduce_scatter(output.view(), input.view(),
                                  ReduceScatterOptions{op, kUnsetTimeout, async});
      });
      expect("reduce_scatter " + tag, output.read(), mine, dt, approx);
      expect("reduce_scatter's input " + tag, input.read(), big, dt);
    }
    {
      // In place: the output is this rank's slot of the input.
      Buffer t = buffer(big, dt);
      call("reduce_scatter in place " + tag, [&](bool async) {
        return pg_.reduce_scatter(t.view(static_cast<size_t>(r_) * n, n), t.view(),
                                  ReduceScatterOptions{op, kUnsetTimeout, async});
      });
      expect("reduce_scatter in place " + tag, slice(t.read(), dt, static_cast<size_t>(r_) * n, n),
             mine, dt, approx);
    }
    {
      std::vector<Buffer> parts;
      std::vector<TensorView> views;
      for (int p = 0; p < P_; ++p)
        parts.push_back(buffer(slice(big, dt, static_cast<size_t>(p) * n, n), dt));
      for (auto& part : parts) views.push_back(part.view());
      Buffer output = buffer(filler(dt, n), dt);
      call("reduce_scatter (list) " + tag, [&](bool async) {
        return pg_.reduce_scatter(output.view(), views,
                                  ReduceScatterOptions{op, kUnsetTimeout, async});
      });
      expect("reduce_scatter (list) " + tag, output.read(), mine, dt, approx);
    }
  }

  // Rank s's part for rank d in all_to_all: uneven, sometimes empty.
  size_t part_count(int s, int d, size_t n) const {
    if (n == 0 || (s + 2 * d) % 3 == 0) return 0;
    return n + static_cast<size_t>((s + d) % 2);
  }
  // What rank s sends rank d: distinct per (s, d).
  static std::vector<uint8_t> part_data(DataType dt, size_t count, int s, int d) {
    return make_data(dt, count, s, ReduceOp::kSum, static_cast<size_t>(d) * 4099);
  }

  void data_movement(DataType dt, size_t n) {
    const std::string tag = str_cat(dt, " n=", n);
    const auto data_of = [&](int p) { return make_data(dt, n, p, ReduceOp::kSum); };
    const auto mine = data_of(r_);
    std::vector<uint8_t> everyone;
    for (int p = 0; p < P_; ++p) everyone = concat(std::move(everyone), data_of(p));
    {
      const int root = static_cast<int>(n % static_cast<size_t>(P_));
      Buffer t = buffer(mine, dt);
      call(str_cat("broadcast from ", root, " ", tag), [&](bool async) {
        return pg_.broadcast(t.view(), BroadcastOptions{root, kUnsetTimeout, async});
      });
      expect(str_cat("broadcast from ", root, " ", tag), t.read(), data_of(root), dt);
    }
    {
      Buffer input = buffer(mine, dt);
      Buffer output = buffer(filler(dt, static_cast<size_t>(P_) * n), dt);
      call("all_gather " + tag, [&](bool async) {
        return pg_.all_gather(output.view(), input.view(), AllGatherOptions{kUnsetTimeout, async});
      });
      expect("all_gather " + tag, output.read(), everyone, dt);
    }
    {
      // In place: the input is this rank's slot of the output.
      auto start = filler(dt, static_cast<size_t>(P_) * n);
      std::copy(mine.begin(), mine.end(),
                start.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(r_) * mine.size()));
      Buffer t = buffer(start, dt);
      call("all_gather in place " + tag, [&](bool async) {
        return pg_.all_gather(t.view(), t.view(static_cast<size_t>(r_) * n, n),
                              AllGatherOptions{kUnsetTimeout, async});
      });
      expect("all_gather in place " + tag, t.read(), everyone, dt);
    }
    {
      Buffer input = buffer(mine, dt);
      std::vector<Buffer> outs;
      std::vector<TensorView> views;
      for (int p = 0; p < P_; ++p) outs.push_back(buffer(filler(dt, n), dt));
      for (auto& o : outs) views.push_back(o.view());
      call("all_gather (list) " + tag, [&](bool async) {
        return pg_.all_gather(views, input.view(), AllGatherOptions{kUnsetTimeout, async});
      });
      for (int p = 0; p < P_; ++p)
        expect(str_cat("all_gather (list) slot ", p, " ", tag), outs[p].read(), data_of(p), dt);
    }
    {
      const int root = static_cast<int>((n + 1) % static_cast<size_t>(P_));
      Buffer input = buffer(mine, dt);
      std::vector<Buffer> outs;
      std::vector<TensorView> views;
      if (r_ == root)
        for (int p = 0; p < P_; ++p) outs.push_back(buffer(filler(dt, n), dt));
      for (auto& o : outs) views.push_back(o.view());
      call(str_cat("gather to ", root, " ", tag), [&](bool async) {
        return pg_.gather(views, input.view(), GatherOptions{root, kUnsetTimeout, async});
      });
      for (size_t p = 0; p < outs.size(); ++p)
        expect(str_cat("gather to ", root, " slot ", p, " ", tag), outs[p].read(),
               data_of(static_cast<int>(p)), dt);
    }
    {
      const int root = static_cast<int>((n + 2) % static_cast<size_t>(P_));
      Buffer output = buffer(filler(dt, n), dt);
      std::vector<Buffer> ins;
      std::vector<TensorView> views;
      if (r_ == root)
        for (int p = 0; p < P_; ++p) ins.push_back(buffer(part_data(dt, n, root, p), dt));
      for (auto& i : ins) views.push_back(i.view());
      call(str_cat("scatter from ", root, " ", tag), [&](bool async) {
        return pg_.scatter(output.view(), views, ScatterOptions{root, kUnsetTimeout, async});
      });
      expect(str_cat("scatter from ", root, " ", tag), output.read(), part_data(dt, n, root, r_),
             dt);
    }
    all_to_all(dt, n, tag);
  }

  void all_to_all(DataType dt, size_t n, const std::string& tag) {
    {
      std::vector<Buffer> ins, outs;
      std::vector<TensorView> in_views, out_views;
      for (int p = 0; p < P_; ++p) {
        ins.push_back(buffer(part_data(dt, part_count(r_, p, n), r_, p), dt));
        outs.push_back(buffer(filler(dt, part_count(p, r_, n)), dt));
      }
      for (int p = 0; p < P_; ++p) {
        in_views.push_back(ins[p].view());
        out_views.push_back(outs[p].view());
      }
      call("all_to_all (uneven lists) " + tag, [&](bool async) {
        return pg_.all_to_all(out_views, in_views, AllToAllOptions{kUnsetTimeout, async});
      });
      for (int p = 0; p < P_; ++p)
        expect(str_cat("all_to_all (uneven lists) from ", p, " ", tag), outs[p].read(),
               part_data(dt, part_count(p, r_, n), p, r_), dt);
    }
    {
      std::vector<size_t> in_splits, out_splits;
      std::vector<uint8_t> input, want;
      for (int p = 0; p < P_; ++p) {
        in_splits.push_back(part_count(r_, p, n));
        out_splits.push_back(part_count(p, r_, n));
        input = concat(std::move(input), part_data(dt, in_splits.back(), r_, p));
        want = concat(std::move(want), part_data(dt, out_splits.back(), p, r_));
      }
      Buffer in = buffer(input, dt), out = buffer(filler(dt, want.size() / element_size(dt)), dt);
      call("all_to_all_single (split sizes) " + tag, [&](bool async) {
        return pg_.all_to_all_single(out.view(), in.view(), out_splits, in_splits,
                                     AllToAllOptions{kUnsetTimeout, async});
      });
      expect("all_to_all_single (split sizes) " + tag, out.read(), want, dt);
    }
    {
      std::vector<uint8_t> input, want;
      for (int p = 0; p < P_; ++p) {
        input = concat(std::move(input), part_data(dt, n, r_, p));
        want = concat(std::move(want), part_data(dt, n, p, r_));
      }
      Buffer in = buffer(input, dt), out = buffer(filler(dt, static_cast<size_t>(P_) * n), dt);
      call("all_to_all_single (equal parts) " + tag, [&](bool async) {
        return pg_.all_to_all_single(out.view(), in.view(), {}, {},
                                     AllToAllOptions{kUnsetTimeout, async});
      });
      expect("all_to_all_single (equal parts) " + tag, out.read(), want, dt);
    }
  }

  void point_to_point(DataType dt) {
    const int right = (r_ + 1) % P_, left = (r_ + P_ - 1) % P_;
    const size_t n = 1031;
    const std::string tag = str_cat(dt, " n=", n);
    // Blocking send/recv around the ring, even ranks sending first.
    {
      Buffer out = buffer(part_data(dt, n, r_, right), dt), in = buffer(filler(dt, n), dt);
      auto send = [&] {
        call("send to " + std::to_string(right), [&](bool async) {
          return pg_.send(out.view(), right, P2POptions{3, kUnsetTimeout, async});
        });
      };
      auto recv = [&] {
        call("recv from " + std::to_string(left), [&](bool async) {
          auto w = pg_.recv(in.view(), left, P2POptions{3, kUnsetTimeout, async});
          w->wait();
          if (w->source_rank() != left)
            throw std::runtime_error(str_cat("source_rank() ", w->source_rank()));
          return w;
        });
      };
      if (r_ % 2 == 0) {
        send();
        recv();
      } else {
        recv();
        send();
      }
      expect("send/recv around the ring " + tag, in.read(), part_data(dt, n, left, r_), dt);
    }
    // batch_isend_irecv both ways at once, and FIFO per (peer, tag): two
    // messages on one tag arrive in the order sent. (With two ranks the one
    // peer is both neighbours; the tags keep the directions apart.)
    {
      Buffer a = buffer(part_data(dt, n, r_, 0), dt), b = buffer(part_data(dt, n, r_, 1), dt);
      Buffer c = buffer(part_data(dt, n, r_, 2), dt);
      Buffer from_left1 = buffer(filler(dt, n), dt), from_left2 = buffer(filler(dt, n), dt);
      Buffer from_right = buffer(filler(dt, n), dt);
      std::vector<P2POp> ops{{P2POpType::kIsend, a.view(), right, 5},
                             {P2POpType::kIsend, b.view(), right, 5},
                             {P2POpType::kIsend, c.view(), left, 6},
                             {P2POpType::kIrecv, from_left1.view(), left, 5},
                             {P2POpType::kIrecv, from_left2.view(), left, 5},
                             {P2POpType::kIrecv, from_right.view(), right, 6}};
      call(
          "batch_isend_irecv " + tag, [&](bool) { return pg_.batch_isend_irecv(ops); }, false);
      expect("batch_isend_irecv first message " + tag, from_left1.read(), part_data(dt, n, left, 0),
             dt);
      expect("batch_isend_irecv second message " + tag, from_left2.read(),
             part_data(dt, n, left, 1), dt);
      expect("batch_isend_irecv the other way " + tag, from_right.read(),
             part_data(dt, n, right, 2), dt);
    }
    // Receives matched by tag, not by arrival: tag 8 is sent first and
    // received last.
    if (b_.tag_matching) {
      Buffer first = buffer(part_data(dt, 7, r_, 8), dt),
             second = buffer(part_data(dt, 7, r_, 9), dt);
      Buffer got8 = buffer(filler(dt, 7), dt), got9 = buffer(filler(dt, 7), dt);
      auto s8 = pg_.send(first.view(), right, P2POptions{8});
      auto s9 = pg_.send(second.view(), right, P2POptions{9});
      auto r9 = pg_.recv(got9.view(), left, P2POptions{9});
      auto r8 = pg_.recv(got8.view(), left, P2POptions{8});
      for (auto* w : {&s8, &s9, &r9, &r8}) (*w)->wait();
      expect("recv by tag (tag 8) " + tag, got8.read(), part_data(dt, 7, left, 8), dt);
      expect("recv by tag (tag 9) " + tag, got9.read(), part_data(dt, 7, left, 9), dt);
    }
    if (b_.early_receives) early_receives(dt);
    any_source(dt);
  }

  // Receives posted before the sends and collectives they must not wait
  // for, as pipeline schedules and halo exchanges post them.
  void early_receives(DataType dt) {
    const int right = (r_ + 1) % P_, left = (r_ + P_ - 1) % P_;
    const size_t n = 517;
    const std::string tag = str_cat(dt, " n=", n);
    // irecv from the left, then a blocking send to the right, then wait:
    // every rank posts its receive first, so each send must go out while
    // the receive before it is still open.
    {
      Buffer out = buffer(part_data(dt, n, r_, 20), dt), in = buffer(filler(dt, n), dt);
      auto q = pg_.recv(in.view(), left, P2POptions{20, kUnsetTimeout, true});
      pg_.send(out.view(), right, P2POptions{20, kUnsetTimeout, false})->wait();
      q->wait();
      if (q->source_rank() != left)
        throw std::runtime_error(where(str_cat("early irecv: source_rank() ", q->source_rank())));
      expect("irecv posted before the send " + tag, in.read(), part_data(dt, n, left, 20), dt);
    }
    // An irecv still open across a collective: irecv, all_reduce, then the
    // send that feeds the neighbour's receive, then wait.
    {
      Buffer out = buffer(part_data(dt, n, r_, 21), dt), in = buffer(filler(dt, n), dt);
      auto int32_bytes = [](int32_t v) {
        std::vector<uint8_t> b(3 * sizeof(int32_t));
        for (int i = 0; i < 3; ++i) std::memcpy(b.data() + i * sizeof(int32_t), &v, sizeof v);
        return b;
      };
      Buffer sum = buffer(int32_bytes(r_ + 1), DataType::kInt32);
      auto q = pg_.recv(in.view(), left, P2POptions{21, kUnsetTimeout, true});
      pg_.all_reduce(sum.view(), AllReduceOptions{ReduceOp::kSum, kUnsetTimeout, false})->wait();
      auto s = pg_.send(out.view(), right, P2POptions{21, kUnsetTimeout, true});
      q->wait();
      s->wait();
      expect("irecv open across an all_reduce " + tag, in.read(), part_data(dt, n, left, 21), dt);
      expect("the all_reduce beside the open irecv", sum.read(), int32_bytes(P_ * (P_ + 1) / 2),
             DataType::kInt32);
    }
    // A refused receive posts nothing: it must not take the next message
    // meant for a later receive (one over 4 GiB from any source, whose
    // pieces could come from different senders).
    {
      std::vector<uint8_t> huge_bytes(1);
      const TensorView huge{huge_bytes.data(), (size_t{1} << 32) + 64, DataType::kUInt8};
      bool refused = false;
      try {
        pg_.recv(huge, kAnySource, P2POptions{22, kUnsetTimeout, true})->wait();
      } catch (const InvalidArgument& e) {
        refused = std::string(e.what()).find("any source") != std::string::npos;
        if (!refused) throw std::runtime_error(where(str_cat("refusal: ", e.what())));
      }
      if (!refused)
        throw std::runtime_error(where("a receive over 4 GiB from any source was not refused"));
      Buffer out = buffer(part_data(dt, n, r_, 22), dt), in = buffer(filler(dt, n), dt);
      auto q = pg_.recv(in.view(), left, P2POptions{22, kUnsetTimeout, true});
      pg_.send(out.view(), right, P2POptions{22, kUnsetTimeout, false})->wait();
      q->wait();
      expect("a receive after a refused batch " + tag, in.read(), part_data(dt, n, left, 22), dt);
    }
  }

  // Every other rank sends rank 0 one message; rank 0 takes them from any
  // source and learns who sent each from the Work.
  void any_source(DataType dt) {
    const size_t n = 5;
    if (!b_.any_source) {
      if (r_ == 0) {
        Buffer in = buffer(filler(dt, n), dt);
        try {
          pg_.recv(in.view(), kAnySource);
        } catch (const InvalidArgument& e) {
          if (std::string(e.what()).find("any source") == std::string::npos)
            throw std::runtime_error(where(str_cat("any-source refusal: ", e.what())));
          return;
        }
        throw std::runtime_error(where("recv from any source was not refused"));
      }
      return;
    }
    if (r_ != 0) {
      Buffer out = buffer(part_data(dt, n, r_, 0), dt);
      call("send to 0 for an any-source recv", [&](bool async) {
        return pg_.send(out.view(), 0, P2POptions{11, kUnsetTimeout, async});
      });
      return;
    }
    std::vector<bool> seen(static_cast<size_t>(P_), false);
    for (int k = 1; k < P_; ++k) {
      Buffer in = buffer(filler(dt, n), dt);
      auto w = pg_.recv(in.view(), kAnySource, P2POptions{11});
      w->wait();
      const int src = w->source_rank();
      if (src <= 0 || src >= P_ || seen[static_cast<size_t>(src)])
        throw std::runtime_error(where(str_cat("any-source recv: source_rank() ", src)));
      seen[static_cast<size_t>(src)] = true;
      expect(str_cat("any-source recv from ", src, " ", dt), in.read(), part_data(dt, n, src, 0),
             dt);
    }
  }

  ProcessGroup& pg_;
  const ContractBackend& b_;
  const MatrixOptions& o_;
  const int P_, r_;
  uint64_t calls_ = 0;
};

}  // namespace

uint64_t run_op_matrix(ProcessGroup& pg, const ContractBackend& backend,
                       const MatrixOptions& options) {
  return Matrix(pg, backend, options).run();
}

}  // namespace collie::test
