// ddp_bench: what DDP's bucketing and overlap buy. Every rank trains the
// same MLP on its own batch and we time one optimizer step (forward,
// backward, gradient averaging, SGD) in these modes:
//
//   none       no communication at all: the compute floor
//   flat       backward, then one all_reduce of all gradients (no overlap)
//   per-param  DDP with one bucket per parameter (overlap, many messages)
//   ddp:<mb>   DDP with bucket_cap_mb = <mb> (the first bucket 1 MiB)
//
// "hidden" is the share of the flat mode's communication time that the mode
// hides behind backward: (flat - mode) / (flat - none).
//
//   ddp_bench --nproc 4 --sizes 784,1024,1024,1024,1024,10 --batch 64 --steps 10 --rounds 3
//   collie-run --nproc-per-node 4 ddp_bench ...      # under the launcher
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>

#include "collie/base/child_process.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/nn/ddp.h"
#include "collie/nn/loss.h"
#include "collie/nn/sequential.h"
#include "collie/nn/sgd.h"
#include "collie/runtime/api/distributed.h"

namespace {

using namespace collie;
using namespace collie::nn;

struct Options {
  int nproc = 0;
  std::string sizes = "784,1024,1024,1024,1024,10";
  int64_t batch = 64;
  int steps = 10;
  int warmup = 2;
  int rounds = 3;
  std::string caps = "1,5,25";
  std::string rdzv;  // set for the ranks --nproc starts
};

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoll(item));
  return out;
}

std::vector<double> parse_doubles(const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stod(item));
  return out;
}

// Starts `nproc` copies of this program meeting through a file:// store.
int run_local_ranks(int nproc, int argc, char** argv) {
  const auto dir = std::filesystem::temp_directory_path() / str_cat("ddp_bench.", ::getpid());
  std::filesystem::create_directories(dir);
  std::vector<ChildProcess> ranks;
  for (int rank = 0; rank < nproc; ++rank) {
    std::vector<std::string> args{"/proc/self/exe"};
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--nproc") {
        ++i;
        continue;
      }
      args.push_back(a);
    }
    args.insert(args.end(), {"--rdzv", (dir / "store").string()});
    ranks.push_back(ChildProcess::spawn(
        args, {.env = {{"RANK", std::to_string(rank)}, {"WORLD_SIZE", std::to_string(nproc)}}}));
  }
  int result = 0;
  for (ChildProcess& rank : ranks)
    if (!rank.reap().ok()) result = 1;
  std::filesystem::remove_all(dir);
  return result;
}

// Step times in ms, each the slowest rank's.
std::vector<double> time_steps(const Options& o, ProcessGroup& group,
                               const std::function<void()>& step) {
  for (int i = 0; i < o.warmup; ++i) step();
  std::vector<double> times;
  for (int i = 0; i < o.steps; ++i) {
    group.barrier()->wait();
    auto start = Clock::now();
    step();
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    group.all_reduce(view(&ms, 1), {.op = ReduceOp::kMax})->wait();
    times.push_back(ms);
  }
  return times;
}

int run_rank(const Options& o) {
  InitOptions init{.backend = "cpu"};
  if (!o.rdzv.empty()) init.init_method = "file://" + o.rdzv;
  init_process_group(init);
  ProcessGroup& group = *get_default_group();
  const auto sizes = parse_list(o.sizes);
  Sequential model = make_mlp<float>({.sizes = sizes, .seed = 1, .flatten = false});
  Sgd optimizer(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x({o.batch, sizes.front()}), grad;
  Generator g(static_cast<uint64_t>(group.rank()));
  for (size_t i = 0; i < x.numel(); ++i) x[i] = g.uniform(-1, 1);
  std::vector<int64_t> labels(o.batch);
  for (int64_t i = 0; i < o.batch; ++i) labels[i] = i % sizes.back();
  const double mparams = static_cast<double>(model.num_parameters()) / 1e6;

  auto plain_step = [&](const std::function<void()>& after_backward) {
    optimizer.zero_grad();
    cross_entropy(model.forward(x), labels, &grad);
    model.backward(grad);
    after_backward();
    optimizer.step();
  };
  std::vector<float> flat(model.num_parameters());
  auto flat_all_reduce = [&] {
    size_t pos = 0;
    for (auto* p : model.parameters()) {
      std::copy(p->grad(), p->grad() + p->numel(), flat.begin() + pos);
      pos += p->numel();
    }
    group.all_reduce(view(flat.data(), flat.size()), {.op = ReduceOp::kAvg})->wait();
    pos = 0;
    for (auto* p : model.parameters()) {
      std::copy(flat.begin() + pos, flat.begin() + pos + p->numel(), p->grad());
      pos += p->numel();
    }
  };
  // A mode runs `steps` timed steps; DDP modes wrap the model for that run.
  struct Mode {
    std::string name;
    std::optional<DdpOptions> ddp;  // nullopt: no DDP
    bool flat = false;
    std::vector<double> times;
    size_t buckets = 0;
  };
  std::vector<Mode> modes;
  modes.push_back({"none", std::nullopt});
  modes.push_back({"flat", std::nullopt, true, {}, 1});
  modes.push_back({"per-param", DdpOptions{.bucket_cap_mb = 1e-9, .first_bucket_cap_mb = 1e-9}});
  for (double mb : parse_doubles(o.caps))
    modes.push_back({str_cat("ddp:", mb), DdpOptions{.bucket_cap_mb = mb}});
  // Rounds interleave the modes, so that load from elsewhere on the machine
  // spreads over all of them instead of skewing one.
  for (int round = 0; round < o.rounds; ++round) {
    for (auto& mode : modes) {
      std::vector<double> t;
      if (!mode.ddp) {
        t = time_steps(o, group, [&] {
          plain_step(mode.flat ? std::function<void()>(flat_all_reduce) : [] {});
        });
      } else {
        DistributedDataParallel ddp(model, group, *mode.ddp);
        mode.buckets = ddp.reducer().buckets().size();
        t = time_steps(o, group, [&] {
          optimizer.zero_grad();
          cross_entropy(ddp.forward(x), labels, &grad);
          ddp.backward(grad);
          optimizer.step();
        });
      }
      mode.times.insert(mode.times.end(), t.begin(), t.end());
    }
  }
  struct Row {
    std::string mode;
    double ms;
    size_t buckets;
  };
  std::vector<Row> rows;
  for (auto& mode : modes) {
    std::sort(mode.times.begin(), mode.times.end());
    rows.push_back({mode.name, mode.times[mode.times.size() / 2], mode.buckets});
  }

  if (group.rank() == 0) {
    const double none = rows[0].ms, flat_ms = rows[1].ms;
    std::printf(
        "# ddp_bench: %d ranks, MLP %s (%.2fM params, %.1f MB of gradients), batch %lld per rank\n",
        group.size(), o.sizes.c_str(), mparams, mparams * 4, static_cast<long long>(o.batch));
    std::printf("%-12s %8s %10s %10s %8s\n", "mode", "buckets", "step_ms", "comm_ms", "hidden");
    for (const auto& r : rows) {
      const double comm = r.ms - none;
      std::string hidden = "-";
      if (r.mode != "none" && r.mode != "flat" && flat_ms > none)
        hidden = str_cat(static_cast<int>(100 * (flat_ms - r.ms) / (flat_ms - none)), "%");
      std::printf("%-12s %8zu %10.2f %10.2f %8s\n", r.mode.c_str(), r.buckets, r.ms, comm,
                  hidden.c_str());
    }
  }
  destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "DDP step time: no communication, one flat all_reduce, per-parameter, bucketed (sweep)"};
  Options o;
  app.add_option("--nproc", o.nproc, "start this many local ranks (else run under collie-run)");
  app.add_option("--sizes", o.sizes, "MLP layer sizes, comma-separated");
  app.add_option("--batch", o.batch, "examples per rank per step");
  app.add_option("--steps", o.steps,
                 "timed steps per mode and round (the median of all is reported)");
  app.add_option("--warmup", o.warmup, "untimed steps per mode and round");
  app.add_option("--rounds", o.rounds, "times the whole set of modes is run, interleaved");
  app.add_option("--caps", o.caps, "bucket_cap_mb values to sweep, comma-separated");
  app.add_option("--rdzv", o.rdzv, "file:// rendezvous path (set by --nproc)")->group("");
  CLI11_PARSE(app, argc, argv);
  try {
    if (o.nproc > 0) return run_local_ranks(o.nproc, argc, argv);
    return run_rank(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_bench: %s\n", e.what());
    return 1;
  }
}
