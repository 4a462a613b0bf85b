// gloo_collectives: Gloo's collectives (and its send/recv) over its TCP
// transport, timed like collie-bench: one process per rank, float32, sizes
// from MIN to MAX bytes multiplied by FACTOR. Ranks meet through a gloo
// FileStore directory; each listens on HOST (127.0.0.1 on one machine, the
// namespace's address in bench/multihost). Rank 0 prints one line per
// collective and size:
//
//   bytes time_us algbw_gbps busbw_gbps collective
//
// Usage: gloo_collectives RANK WORLD STORE_DIR HOST ALGO COLLECTIVES MIN MAX FACTOR
//                         ITERS WARMUP ITER_BYTES
//
//   ALGO         ring: all_reduce is Gloo's ring (what torch's ProcessGroupGloo
//                runs for CPU tensors); hd: halving-doubling
//                (AllreduceHalvingDoubling, ReduceScatterHalvingDoubling)
//   COLLECTIVES  comma-separated: all_reduce, broadcast (root 0), reduce (root
//                0), all_gather, reduce_scatter (hd only: Gloo has no ring
//                reduce_scatter), gather and scatter (root 0), all_to_all
//                (gloo::alltoall), all_to_all_uneven (gloo::alltoallv with
//                peer_sweep::router_splits' counts), pingpong (ranks 0 and 1,
//                one-way time: half a round trip) and stream (rank 0 sends
//                ITERS messages back to back, rank 1 acknowledges the last:
//                time per message), both over Gloo's unbound buffers
//   bytes        as nccl-tests count them: the buffer for all_reduce,
//                broadcast and reduce, the whole gathered / scattered /
//                exchanged buffer (WORLD parts) for the others; the message
//                for pingpong and stream
//   time         averaged over the ranks; pingpong and stream: rank 0's
//   ITER_BYTES   0, or at most ITER_BYTES / bytes timed calls per size (at
//                least 1, at most ITERS; the warm-up at most as many), so
//                that a sweep to 256 MiB over a 1 Gbit/s link ends in minutes
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "collie/bench/compare/peer_sweep.h"

namespace {

using Clock = std::chrono::steady_clock;
using SumFn = void (*)(void*, const void*, const void*, size_t);

struct Sweep {
  size_t min_bytes, max_bytes;
  double factor;
  int iters, warmup;
  size_t iter_bytes;
};

class Runner {
 public:
  Runner(std::shared_ptr<gloo::Context> context, std::string algo, size_t max_bytes)
      : ctx_(std::move(context)),
        algo_(std::move(algo)),
        data_(max_bytes / sizeof(float) + 1, 1.0f),
        out_(data_.size() + static_cast<size_t>(ctx_->size), 0.0f) {}

  // After the timed calls: the stream's acknowledgement, else nothing.
  std::function<void()> finish;

  // One closure per call of `collective` on `bytes`; empty where the size has
  // no float per rank (nccl-tests skips those too) or Gloo lacks the pairing.
  std::function<void()> prepare(const std::string& collective, size_t bytes) {
    const int world = ctx_->size;
    const size_t count = bytes / sizeof(float), part = count / world;
    if (collective == "all_reduce") {
      if (count == 0) return {};
      if (algo_ == "hd") {
        auto hd = std::make_shared<gloo::AllreduceHalvingDoubling<float>>(
            ctx_, std::vector<float*>{data_.data()}, static_cast<int>(count));
        return [hd] { hd->run(); };
      }
      return [this, count] {
        gloo::AllreduceOptions opts(ctx_);
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setOutput(data_.data(), count);
        opts.setReduceFunction(static_cast<SumFn>(&gloo::sum<float>));
        opts.setTag(tag_++);
        gloo::allreduce(opts);
      };
    }
    if (collective == "broadcast") {
      if (count == 0) return {};
      return [this, count] {
        gloo::BroadcastOptions opts(ctx_);
        opts.setOutput(data_.data(), count);
        opts.setRoot(0);
        opts.setTag(tag_++);
        gloo::broadcast(opts);
      };
    }
    if (collective == "all_gather") {
      if (part == 0) return {};
      return [this, part, world] {
        gloo::AllgatherOptions opts(ctx_);
        opts.setInput(data_.data(), part);
        opts.setOutput(out_.data(), part * world);
        opts.setTag(tag_++);
        gloo::allgather(opts);
      };
    }
    if (collective == "reduce_scatter") {
      if (part == 0 || algo_ != "hd") return {};
      auto rs = std::make_shared<gloo::ReduceScatterHalvingDoubling<float>>(
          ctx_, std::vector<float*>{data_.data()}, static_cast<int>(part * world),
          std::vector<int>(world, static_cast<int>(part)));
      return [rs] { rs->run(); };
    }
    if (collective == "reduce") {
      if (count == 0) return {};
      return [this, count] {
        gloo::ReduceOptions opts(ctx_);
        opts.setInput(data_.data(), count);
        opts.setOutput(out_.data(), count);
        opts.setRoot(0);
        opts.setReduceFunction(static_cast<SumFn>(&gloo::sum<float>));
        opts.setTag(tag_++);
        gloo::reduce(opts);
      };
    }
    if (collective == "gather") {
      if (part == 0) return {};
      return [this, part, world] {
        gloo::GatherOptions opts(ctx_);
        opts.setInput(data_.data(), part);
        if (ctx_->rank == 0) opts.setOutput(out_.data(), part * world);
        opts.setRoot(0);
        opts.setTag(tag_++);
        gloo::gather(opts);
      };
    }
    if (collective == "scatter") {
      if (part == 0) return {};
      return [this, part, world] {
        gloo::ScatterOptions opts(ctx_);
        if (ctx_->rank == 0) {
          std::vector<float*> parts;
          for (int p = 0; p < world; ++p) parts.push_back(data_.data() + p * part);
          opts.setInputs(parts, part);
        }
        opts.setOutput(out_.data(), part);
        opts.setRoot(0);
        opts.setTag(tag_++);
        gloo::scatter(opts);
      };
    }
    if (collective == "all_to_all") {
      if (part == 0) return {};
      return [this, part, world] {
        gloo::AlltoallOptions opts(ctx_);
        opts.setInput(data_.data(), part * world);
        opts.setOutput(out_.data(), part * world);
        opts.setTag(tag_++);
        gloo::alltoall(opts);
      };
    }
    if (collective == "all_to_all_uneven") {
      if (part == 0) return {};
      const auto sends = peer_sweep::router_splits(count, world, ctx_->rank);
      const auto recvs = peer_sweep::router_receives(count, world, ctx_->rank);
      return [this, in = std::vector<int64_t>(sends.begin(), sends.end()),
              out = std::vector<int64_t>(recvs.begin(), recvs.end())] {
        gloo::AlltoallvOptions opts(ctx_);
        opts.setInput(data_.data(), in);
        opts.setOutput(out_.data(), out);
        opts.setTag(tag_++);
        gloo::alltoallv(opts);
      };
    }
    if (collective == "pingpong" || collective == "stream")
      return point_to_point(collective, bytes);
    std::fprintf(stderr, "gloo_collectives: unknown collective %s\n", collective.c_str());
    std::exit(2);
  }

  // Ranks 0 and 1 over Gloo's unbound buffers (the others idle): a round
  // trip per call for pingpong; for stream one message per call and, in
  // finish, rank 1's one-byte word that the last has arrived.
  std::function<void()> point_to_point(const std::string& collective, size_t bytes) {
    const int rank = ctx_->rank;
    if (bytes == 0 || rank > 1) return [] {};
    std::shared_ptr<gloo::transport::UnboundBuffer> send =
        ctx_->createUnboundBuffer(data_.data(), bytes);
    std::shared_ptr<gloo::transport::UnboundBuffer> recv =
        ctx_->createUnboundBuffer(out_.data(), bytes);
    const int peer = 1 - rank;
    constexpr uint64_t kSlot = 7, kAckSlot = 8;
    if (collective == "stream") {
      std::shared_ptr<gloo::transport::UnboundBuffer> ack = ctx_->createUnboundBuffer(&ack_, 1);
      finish = [ack, rank, peer] {
        if (rank == 1) {
          ack->send(peer, kAckSlot);
          ack->waitSend();
        } else {
          ack->recv(peer, kAckSlot);
          ack->waitRecv();
        }
      };
      if (rank == 0)
        return [send, peer] {
          send->send(peer, kSlot);
          send->waitSend();
        };
      return [recv, peer] {
        recv->recv(peer, kSlot);
        recv->waitRecv();
      };
    }
    if (rank == 0)
      return [send, recv, peer] {
        send->send(peer, kSlot);
        send->waitSend();
        recv->recv(peer, kSlot);
        recv->waitRecv();
      };
    return [recv, peer] {
      recv->recv(peer, kSlot);
      recv->waitRecv();
      recv->send(peer, kSlot);
      recv->waitSend();
    };
  }

  // The mean of every rank's time per call.
  double average(double us) {
    double v = us;
    gloo::AllreduceOptions opts(ctx_);
    opts.setOutput(&v, 1);
    opts.setReduceFunction(static_cast<SumFn>(&gloo::sum<double>));
    opts.setTag(tag_++);
    gloo::allreduce(opts);
    return v / ctx_->size;
  }

 private:
  std::shared_ptr<gloo::Context> ctx_;
  std::string algo_;
  std::vector<float> data_, out_;
  char ack_ = 0;
  uint32_t tag_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 13) {
    std::fprintf(stderr,
                 "usage: %s RANK WORLD STORE_DIR HOST ALGO COLLECTIVES MIN MAX FACTOR ITERS "
                 "WARMUP ITER_BYTES\n",
                 argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]), world = std::atoi(argv[2]);
  const std::string store_dir = argv[3], host = argv[4], algo = argv[5];
  if (algo != "ring" && algo != "hd") {
    std::fprintf(stderr, "gloo_collectives: ALGO is ring or hd, not %s\n", algo.c_str());
    return 2;
  }
  std::vector<std::string> collectives;
  std::stringstream list(argv[6]);
  for (std::string c; std::getline(list, c, ',');) collectives.push_back(c);
  const Sweep sweep{std::strtoull(argv[7], nullptr, 10),
                    std::strtoull(argv[8], nullptr, 10),
                    std::atof(argv[9]),
                    std::atoi(argv[10]),
                    std::atoi(argv[11]),
                    std::strtoull(argv[12], nullptr, 10)};

  gloo::transport::tcp::attr attr;
  attr.hostname = host;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(store_dir);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
  context->setTimeout(std::chrono::minutes(5));
  context->connectFullMesh(store, device);
  Runner runner(context, algo, sweep.max_bytes);

  for (const auto& collective : collectives) {
    for (size_t bytes = sweep.min_bytes; bytes <= sweep.max_bytes;) {
      runner.finish = {};
      if (auto call = runner.prepare(collective, bytes)) {
        const int iters = peer_sweep::timed_calls(sweep.iters, sweep.iter_bytes, bytes);
        const int warmup = std::min(sweep.warmup, iters);
        for (int i = 0; i < warmup; ++i) call();
        if (runner.finish) runner.finish();
        runner.average(0);  // every rank starts the timed calls together
        const auto start = Clock::now();
        for (int i = 0; i < iters; ++i) call();
        if (runner.finish) runner.finish();
        double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;
        const bool p2p = collective == "pingpong" || collective == "stream";
        if (collective == "pingpong") us /= 2;
        const double mean = runner.average(us), avg = p2p ? us : mean;
        const double algbw = bytes / (avg * 1e3);
        if (rank == 0)
          std::printf("%zu %.2f %.4f %.4f %s\n", bytes, avg, algbw,
                      algbw * peer_sweep::bus_factor(collective, world), collective.c_str());
        std::fflush(stdout);
      }
      const auto next = static_cast<size_t>(bytes * sweep.factor);
      bytes = next > bytes ? next : bytes + 1;
    }
  }
  return 0;
}
