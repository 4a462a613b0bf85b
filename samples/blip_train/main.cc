// blip_train: BLIP's distributed training loop (train_*.py) in C++ on
// Fashion-MNIST. Every step of the tutorial is here, in its order:
//
//   args -> init_distributed_mode (RANK/WORLD_SIZE/LOCAL_RANK, SLURM_PROCID,
//   or "Not using distributed mode") -> init_process_group -> barrier ->
//   setup_for_distributed(rank == 0) -> seed + rank -> DistributedSampler
//   (shuffle for train, not for test) -> model, DDP, model_without_ddp ->
//   per epoch: sampler.set_epoch, cosine_lr_schedule, train_one_epoch;
//   evaluate and save on the main process; barrier.
//
//   collie-run --standalone --nproc-per-node 4 build/bin/blip_train --epochs 10
//
// --resume CKPT continues that run in CKPT's own folder (its log.txt goes
// on) unless --output-dir says otherwise, and warns when the world size or
// batch differs from the checkpoint's; --evaluate --resume CKPT evaluates
// CKPT once, writing files only to an explicit --output-dir. Every write is
// checked (run_files.h): a read-only or full folder stops the job, before
// the first epoch where it can be seen then. --timeout (or COLLIE_TIMEOUT)
// bounds the rendezvous and every collective.
//
// --survive-failures goes on when a rank dies (--device cpu, a store that
// outlives the rank: file:// or collie-run's agent store): the survivors
// shrink the group, take the furthest survivor's model and optimizer state
// and reshard the rest of the epoch so that every sample is still used once
// (survival.h, nn/epoch_plan.h; docs/nn.md, "Surviving a failure"). Each
// epoch then prints how often its samples were trained on, and each rank
// the checksum of its final state. A replacement (--join) joins at a step.
//
// --device cuda trains the same MLP on the GPU of each rank (LOCAL_RANK):
// the CUDA model (nn/cuda), DDP over the nccl backend with the gradient
// buckets in device memory, AdamW on the device; evaluation and checkpoints
// go through the host model, so checkpoints are the same files either way.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>

#include "collie/base/error.h"
#include "collie/base/parse_duration.h"
#include "collie/base/str_cat.h"
#include "collie/nn/adamw.h"
#include "collie/nn/data_loader.h"
#include "collie/nn/ddp.h"
#include "collie/nn/distributed_sampler.h"
#include "collie/nn/loss.h"
#include "collie/nn/sequential.h"
#include "collie/rendezvous/env/launch_env.h"
#include "collie/runtime/api/distributed.h"
#include "collie/runtime/process_group/timeline.h"
#include "collie/samples/blip_train/checkpoint.h"
#include "collie/samples/blip_train/fashion_mnist.h"
#include "collie/samples/blip_train/metric_logger.h"
#include "collie/samples/blip_train/run_files.h"
#include "collie/samples/blip_train/survival.h"
#include "collie/samples/blip_train/train_model.h"

namespace fs = std::filesystem;
using namespace collie;
using namespace collie::samples;

namespace {

struct Args {
  int epochs = 10;
  int batch_size = 64;  // per rank
  double lr = 1e-3;
  double min_lr = 0.0;
  double weight_decay = 0.05;
  uint64_t seed = 42;
  std::string output_dir;  // see output_dir_for (run_files.h)
  std::string resume;
  bool evaluate = false;
  bool overwrite = false;
  std::string dist_url = "env://";
  std::string backend;  // default: socket for --device cpu, nccl for cuda
  std::string device = "cpu";
  std::string data_dir = kFashionMnistDir;
  bool synthetic = false;
  size_t synthetic_size = 4096;
  bool dist_eval = false;
  int print_freq = 50;
  int64_t max_steps = -1;  // per epoch, for quick runs
  std::vector<int64_t> hidden = {256, 128};
  std::string timeout;  // --timeout, else COLLIE_TIMEOUT, else 30 min
  std::string trace;    // --trace FILE: the job's timeline (COLLIE_TRACE)
  bool survive_failures = false;
  bool join = false;  // --join or COLLIE_REPLACEMENT=1: a replacement joining the running job
  // --kill-self-at RANK:EPOCH:STEP|end|recover (tests): that rank SIGKILLs
  // itself.
  std::string kill_self_at;
  int kill_rank = -1, kill_epoch = -1;
  int64_t kill_step = -1;  // -1: before the epoch's end, -2: in its first recovery
  // Filled by run() and init_distributed_mode.
  Timeout timeout_ms = kUnsetTimeout;
  bool distributed = false;
  int rank = 0, world_size = 1, gpu = 0;
};

// The tutorial's init_distributed_mode, with collie's launch detection
// (which also reads SLURM_NTASKS for the world size, unlike BLIP).
void init_distributed_mode(Args& args) {
  LaunchEnv env = detect_launch_env();
  if (env.source == LaunchSource::kNone) {
    std::printf("Not using distributed mode\n");
    args.distributed = false;
    return;
  }
  args.rank = env.rank;
  args.world_size = env.world_size;
  args.gpu = env.local_rank >= 0 ? env.local_rank : env.rank;
  args.distributed = true;
  std::printf("| distributed init (rank %d): %s (%s)\n", args.rank, args.dist_url.c_str(),
              to_string(env.source));
  std::fflush(stdout);
  init_process_group({.backend = args.backend,
                      .init_method = args.dist_url,
                      .world_size = args.world_size,
                      .rank = args.rank,
                      .timeout = args.timeout_ms,
                      .join = args.join});
  if (!args.join) barrier();  // a joiner's group is the members': they are training
  setup_for_distributed(get_rank() == 0);
}

// config.json, and the "config" of every checkpoint (check_resumed_run
// reads its world_size and batch_size back).
nlohmann::ordered_json config_json(const Args& a) {
  return {{"epochs", a.epochs},
          {"batch_size", a.batch_size},
          {"lr", a.lr},
          {"min_lr", a.min_lr},
          {"weight_decay", a.weight_decay},
          {"seed", a.seed},
          {"backend", a.backend},
          {"device", a.device},
          {"world_size", a.world_size},
          {"synthetic", a.synthetic},
          {"hidden", a.hidden}};
}

nn::InMemoryDataset to_dataset(const ImageDataset& d) {
  nn::Tensor inputs({static_cast<int64_t>(d.size()), kImagePixels}, d.images);
  std::vector<int64_t> labels(d.labels.begin(), d.labels.end());
  return nn::InMemoryDataset(std::move(inputs), std::move(labels));
}

// Evaluates `indices` of `data` with the plain model. With dist_eval each
// rank passes its sampler shard; `valid` tells how many of them are real
// examples (the sampler pads by repeating the first ones, and a padded
// example must not be counted twice).
EvalStats evaluate(nn::Sequential& model, const nn::Dataset& data, std::vector<int64_t> indices,
                   size_t valid, int batch_size, ProcessGroup* reduce_over, nn::DeviceOps& device) {
  model.eval();
  indices.resize(std::min(indices.size(), valid));
  nn::DataLoader loader(data, std::move(indices), {.batch_size = static_cast<size_t>(batch_size)});
  double sums[3] = {0, 0, 0};  // correct, loss * n, n
  while (auto batch = loader.next()) {
    const nn::Tensor& logits = model.forward(batch->inputs);
    const double n = static_cast<double>(batch->labels.size());
    sums[0] += static_cast<double>(nn::count_correct(logits, batch->labels));
    sums[1] += static_cast<double>(nn::cross_entropy(logits, batch->labels)) * n;
    sums[2] += n;
  }
  if (reduce_over != nullptr) all_reduce_values(*reduce_over, device, sums);
  model.train();
  return {sums[0] / sums[2], sums[1] / sums[2], static_cast<int64_t>(sums[2])};
}

// The test set, as the tutorial evaluates it: with --dist-eval every rank
// its sampler shard (summed over the group), else the main process alone.
EvalStats evaluate_test_set(nn::Sequential& model, const nn::Dataset& test_data,
                            const nn::DistributedSampler& test_sampler, int rank, int world,
                            const Args& args, ProcessGroup* group, nn::DeviceOps& device) {
  if (args.dist_eval && args.distributed) {
    // Rank r holds sampler positions r, r + R, ...: the real ones are < N.
    const size_t n = test_data.size();
    const size_t valid = n > static_cast<size_t>(rank) ? (n - rank + world - 1) / world : 0;
    return evaluate(model, test_data, test_sampler.indices(), valid, 256, group, device);
  }
  if (rank != 0) return {};
  std::vector<int64_t> all(test_data.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  return evaluate(model, test_data, all, all.size(), 256, nullptr, device);
}

// A resumed run at another world size or batch trains with another global
// batch (and other sampler shards) than the checkpoint's run: allowed, but
// said out loud.
// A resumed run whose global batch differs from the checkpoint's is a new
// run: in the checkpoint's own folder it would overwrite that run's later
// checkpoints and append to its log, so it is refused there (unless
// --overwrite); elsewhere it goes on with a warning. A launcher's restarted
// attempt (TORCHELASTIC_RESTART_COUNT > 0: an elastic job that changed size,
// or a restart) is the same job going on, and only warned about.
void check_resumed_run(const std::string& checkpoint, const std::string& config, int world,
                       int batch, const std::string& output_dir, bool overwrite) {
  const auto old_world = json_int(config, "world_size");
  const auto old_batch = json_int(config, "batch_size");
  if (!old_world || !old_batch) {
    print("warning: checkpoint", checkpoint,
          "does not record its world size and batch size; cannot compare the global batch");
    return;
  }
  if (*old_world == world && *old_batch == batch) return;
  std::error_code ec;
  const fs::path folder = fs::path(checkpoint).parent_path().empty()
                              ? fs::path(".")
                              : fs::path(checkpoint).parent_path();
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const bool restarted = restart != nullptr && std::atoi(restart) > 0;
  if (!overwrite && !restarted && !output_dir.empty() &&
      fs::weakly_canonical(output_dir, ec) == fs::weakly_canonical(folder, ec))
    throw InvalidArgument(
        str_cat("--resume ", checkpoint, ": it was trained at world size ", *old_world, " x batch ",
                *old_batch, ", this run has world size ", world, " x batch ", batch,
                ": a different run, which would overwrite that run's later checkpoints and log in ",
                folder.string(), "; give it another --output-dir (or --overwrite)"));
  print(str_cat("warning: resuming ", checkpoint, " with a different global batch: it was trained ",
                "at world size ", *old_world, " x batch ", *old_batch, " = ",
                *old_world * *old_batch, ", this run has world size ", world, " x batch ", batch,
                " = ", world * batch, " (the learning rate and the sampler's shards were set ",
                "for the old one)"));
}

// Rank 0's error message on every rank ("" when there is none): each
// character travels as a number in one all_reduce to which the other ranks
// add zeros. Whichever rank a launcher sees exit first then gives the real
// reason, not "rank 0 failed".
std::string share_rank0_error(ProcessGroup& group, nn::DeviceOps& device,
                              const std::string& error) {
  constexpr size_t kMaxChars = 1024;
  std::vector<double> chars(1 + kMaxChars, 0.0);
  const size_t n = std::min(error.size(), kMaxChars);
  chars[0] = static_cast<double>(n);
  for (size_t i = 0; i < n; ++i) chars[1 + i] = static_cast<unsigned char>(error[i]);
  all_reduce_values(group, device, chars);
  std::string shared(static_cast<size_t>(chars[0]), ' ');
  for (size_t i = 0; i < shared.size(); ++i) shared[i] = static_cast<char>(chars[1 + i]);
  return shared;
}

// The run's files (config.json, log.txt), made by the main process before
// the first epoch. Every rank learns whether that worked, so a read-only or
// full folder stops the whole job here, each rank with the main process's
// reason.
std::optional<RunLog> prepare_output(const Args& args, bool main_process, ProcessGroup* group,
                                     nn::DeviceOps& device) {
  std::optional<RunLog> log;
  std::string error;
  if (main_process && !args.output_dir.empty()) {
    try {
      if (!args.evaluate) claim_output_dir(args.output_dir, args.resume, args.overwrite);
      create_output_dir(args.output_dir);
      if (!args.evaluate) write_config_json(args.output_dir, config_json(args));
      log.emplace((fs::path(args.output_dir) / "log.txt").string());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (group != nullptr) error = share_rank0_error(*group, device, error);
  if (error.empty()) return log;
  throw Error(main_process ? error : "rank 0: " + error);
}

TrainStats train_one_epoch(nn::DistributedDataParallel* ddp, TrainModel& model,
                           nn::Optimizer& optimizer, const nn::Dataset& data,
                           const nn::DistributedSampler& sampler, int epoch, const Args& args) {
  MetricLogger logger;
  logger.meter("lr", 1, "{value:.6f}");
  logger.meter("loss", 50, "{median:.4f} ({global_avg:.4f})");
  nn::DataLoader loader(data, sampler.indices(),
                        {.batch_size = static_cast<size_t>(args.batch_size)});
  int64_t steps = static_cast<int64_t>(loader.num_batches());
  if (args.max_steps >= 0) steps = std::min(steps, args.max_steps);
  nn::Tensor grad;
  int64_t samples = 0;
  const auto start = std::chrono::steady_clock::now();
  logger.log_every(
      {.header = str_cat("Train Epoch: [", epoch, "]"),
       .total = steps,
       .print_freq = args.print_freq},
      [&](int64_t step) {
        const int64_t step_start = timeline::enabled() ? timeline::now_ns() : 0;
        auto t0 = std::chrono::steady_clock::now();
        auto batch = loader.next();
        double data_time =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!batch) throw Error("the data loader ran out of batches early");
        const nn::Tensor& logits = ddp ? ddp->forward(batch->inputs) : model.forward(batch->inputs);
        float loss = nn::cross_entropy(logits, batch->labels, &grad);
        model.zero_grad();
        if (ddp)
          ddp->backward(grad);
        else
          model.backward(grad);
        model.step();
        if (step_start != 0)
          timeline::span("step", str_cat("step ", step), step_start, timeline::now_ns(),
                         {{"epoch", epoch}, {"step", step}}, "step");
        samples += static_cast<int64_t>(batch->labels.size());
        logger.update("loss", loss);
        logger.update("lr", optimizer.lr());
        return data_time;
      },
      [](const std::string& line) { print(line); });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double throughput[1] = {static_cast<double>(samples) / seconds};
  if (ddp) {
    // Everyone's samples per second: the job's throughput. Through the
    // training device's memory, which is what the group's backend takes.
    nn::DeviceOps& device = model.ddp_model().ops();
    all_reduce_values(ddp->group(), device, throughput);
    logger.synchronize_between_processes(ddp->group(), device);
  }
  print(logger.global_avg_str());
  return {logger.at("loss").global_avg(), logger.at("lr").global_avg(), throughput[0]};
}

// The main process's end of an epoch: the log line, the epoch's checkpoint
// and, when it is the best so far, checkpoint_best.pth.
void log_and_save(const Args& args, int epoch, const TrainStats& train, const EvalStats& test,
                  int world, double& best_acc, RunLog& log, nn::Sequential& model,
                  nn::AdamW& optimizer) {
  const bool best = test.acc > best_acc;
  best_acc = std::max(best_acc, test.acc);
  const std::string line = json_line({{"epoch", epoch},
                                      {"train_loss", train.loss},
                                      {"train_lr", train.lr},
                                      {"test_acc", test.acc},
                                      {"test_loss", test.loss},
                                      {"test_count", test.count},
                                      {"world_size", world},
                                      {"samples_per_s", train.samples_per_s}});
  log.append(line);
  print(line);
  CheckpointInfo info{
      .epoch = epoch, .best_acc = best_acc, .config_json = json_line(config_json(args))};
  char name[64];
  std::snprintf(name, sizeof name, "checkpoint_%02d.pth", epoch);
  const std::string path = (fs::path(args.output_dir) / name).string();
  save_checkpoint(path, model, optimizer, info);
  if (best)
    save_checkpoint((fs::path(args.output_dir) / "checkpoint_best.pth").string(), model, optimizer,
                    info);
  print("saved checkpoint", path);
}

int run(Args& args) {
  const bool cuda = args.device == "cuda";
  // "auto" picks by device, not by what the machine has: only nccl reduces
  // device buckets and only cpu host ones.
  if (args.backend == "socket") args.backend = "cpu";  // its old name
  if (args.backend.empty() || args.backend == "auto") args.backend = cuda ? "nccl" : "cpu";
  if (cuda) {
    // Before any rendezvous: a clear reason, not a backend error later.
    const std::string why = cuda_unavailable_reason();
    if (!why.empty()) throw BackendError(str_cat("--device cuda: ", why));
    if (args.backend == "cpu")
      throw InvalidArgument(
          "--device cuda --backend cpu: the cpu backend reduces host buffers, but with "
          "--device cuda DDP's gradient buckets live on the GPU; use --backend nccl (or auto)");
  } else if (args.backend == "nccl") {
    throw InvalidArgument(
        "--device cpu --backend nccl: the nccl backend reduces CUDA buffers, but with --device "
        "cpu DDP's gradient buckets are host memory; use --backend cpu (or --device cuda)");
  }
  if (!args.kill_self_at.empty()) {
    const std::regex re("(\\d+):(\\d+):(\\d+|end|recover)");
    std::smatch m;
    if (!args.survive_failures || !std::regex_match(args.kill_self_at, m, re))
      throw InvalidArgument(
          str_cat("--kill-self-at ", args.kill_self_at,
                  ": expected RANK:EPOCH:STEP, RANK:EPOCH:end or RANK:EPOCH:recover, with "
                  "--survive-failures"));
    args.kill_rank = std::stoi(m[1]);
    args.kill_epoch = std::stoi(m[2]);
    args.kill_step = m[3] == "end" ? -1 : m[3] == "recover" ? -2 : std::stoll(m[3]);
  }
  if (args.survive_failures && args.max_steps >= 0)
    throw InvalidArgument(
        "--survive-failures trains whole epochs (every sample once); drop --max-steps");
  args.join = args.join || started_as_replacement();
  if (args.join && (!args.survive_failures || args.evaluate))
    throw InvalidArgument("--join (COLLIE_REPLACEMENT=1) needs --survive-failures, not --evaluate");
  if (args.survive_failures && cuda)
    throw InvalidArgument(
        "--survive-failures runs on --device cpu only (the nccl backend cannot shrink a group)");
  args.timeout_ms = timeout_from_flag_or_env(args.timeout);
  args.output_dir = output_dir_for(args.output_dir, args.resume, args.evaluate);
  // --trace: init_process_group starts the timeline (what COLLIE_TRACE
  // does in any program) and destroy_process_group writes it; alone, this
  // process records and writes it.
  if (!args.trace.empty()) ::setenv("COLLIE_TRACE", args.trace.c_str(), 1);
  init_distributed_mode(args);
  const char* trace = std::getenv("COLLIE_TRACE");
  if (!args.distributed && trace != nullptr && *trace != '\0') timeline::start(trace, 0, 1);
  const int rank = args.distributed ? get_rank() : 0;
  const int world = args.distributed ? get_world_size() : 1;
  args.world_size = world;

  // Per-rank randomness (dropout, if any): seed + rank, as BLIP does.
  const uint64_t rank_seed = args.seed + static_cast<uint64_t>(rank);

  print("Creating dataset");
  ImageDataset train_raw, test_raw;
  if (args.synthetic) {
    train_raw = make_synthetic(args.synthetic_size, args.seed);
    test_raw = make_synthetic(args.synthetic_size / 4, args.seed + 1000003);
  } else {
    train_raw = load_fashion_mnist(args.data_dir, true);
    test_raw = load_fashion_mnist(args.data_dir, false);
  }
  nn::InMemoryDataset train_data = to_dataset(train_raw), test_data = to_dataset(test_raw);
  nn::DistributedSampler train_sampler(train_data.size(), world, rank, /*shuffle=*/true, args.seed);
  nn::DistributedSampler test_sampler(test_data.size(), world, rank, /*shuffle=*/false, args.seed);
  print("train examples", train_data.size(), "test examples", test_data.size(), "world size", world,
        "global batch", args.batch_size * world);

  print("Creating model");
  std::vector<int64_t> sizes{kImagePixels};
  sizes.insert(sizes.end(), args.hidden.begin(), args.hidden.end());
  sizes.push_back(kNumClasses);
  nn::Sequential model =
      nn::make_mlp<float>({.sizes = sizes, .seed = args.seed, .dropout_seed = rank_seed});
  nn::AdamW optimizer(model.parameters(), {.lr = args.lr, .weight_decay = args.weight_decay});

  int start_epoch = 0;
  double best_acc = 0.0;
  CheckpointInfo resumed;
  if (!args.resume.empty()) {
    resumed = load_checkpoint(args.resume, model, optimizer);
    start_epoch = static_cast<int>(resumed.epoch) + 1;
    best_acc = resumed.best_acc;
    print("resume checkpoint from", args.resume, "(epoch", resumed.epoch, ")");
    if (!args.evaluate && start_epoch >= args.epochs)
      throw InvalidArgument(str_cat("--resume ", args.resume, ": the checkpoint finished epoch ",
                                    resumed.epoch, ", and --epochs ", args.epochs,
                                    " ends there: nothing to train (raise --epochs, or add ",
                                    "--evaluate to evaluate it)"));
    if (!args.evaluate)
      check_resumed_run(args.resume, resumed.config_json, world, args.batch_size, args.output_dir,
                        args.overwrite);
  }

  // The model that trains: the Sequential itself, or its copy on this
  // rank's GPU (after the resume, so it starts from the checkpoint).
  const nn::AdamWOptions adamw_options{.lr = args.lr, .weight_decay = args.weight_decay};
  std::unique_ptr<TrainModel> train_model =
      cuda ? make_cuda_train_model(model, optimizer, adamw_options, args.gpu)
           : make_cpu_train_model(model, optimizer);
  if (cuda) print("training on", args.device, "(CUDA model, DDP buckets in device memory)");

  // The group DDP runs on, held here: after a shrink (--survive-failures)
  // it is the survivors' group, which replaced the default one.
  std::shared_ptr<ProcessGroup> ddp_group = args.distributed ? get_default_group() : nullptr;
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  if (args.distributed)
    ddp = std::make_unique<nn::DistributedDataParallel>(  // a joiner's state comes later
        train_model->ddp_model(), *ddp_group, nn::DdpOptions{.broadcast_parameters = !args.join});
  nn::Sequential& model_without_ddp = model;
  print("model parameters:", model_without_ddp.num_parameters());

  const bool main_process = rank == 0;
  ProcessGroup* group = ddp && !args.join ? &ddp->group() : nullptr;  // a joiner's comes later
  nn::DeviceOps& device = train_model->ddp_model().ops();
  std::optional<RunLog> log = prepare_output(args, main_process, group, device);

  EvalStats test{};
  const auto job_start = std::chrono::steady_clock::now();
  if (args.evaluate) {
    // The checkpoint as it is: no epoch loop, whatever --epochs says.
    test = evaluate_test_set(model_without_ddp, test_data, test_sampler, rank, world, args, group,
                             device);
    const std::string line = json_line({{"epoch", resumed.epoch},
                                        {"test_acc", test.acc},
                                        {"test_loss", test.loss},
                                        {"test_count", test.count},
                                        {"world_size", world}});
    if (log) log->append(line);
    print(line);
  }
  const bool surviving = args.survive_failures && args.distributed && !args.evaluate;
  if (surviving) {
    SurvivalContext context{
        .options = {.epochs = args.epochs,
                    .batch_size = static_cast<size_t>(args.batch_size),
                    .seed = args.seed,
                    .lr = args.lr,
                    .min_lr = args.min_lr,
                    .print_freq = args.print_freq,
                    .timeout = args.timeout_ms,
                    .launch_rank = args.join ? -1 : args.rank,  // a replacement never kills
                    .kill_rank = args.kill_rank,
                    .kill_epoch = args.kill_epoch,
                    .kill_step = args.kill_step,
                    .joiner = args.join},
        .ddp = ddp,
        .group = ddp_group,
        .train_model = *train_model,
        .model = model,
        .optimizer = optimizer,
        .train_data = train_data,
        .evaluate =
            [&](ProcessGroup& g) {
              nn::DistributedSampler shard(test_data.size(), g.size(), g.rank(),
                                           /*shuffle=*/false, args.seed);
              return evaluate_test_set(model, test_data, shard, g.rank(), g.size(), args, &g,
                                       device);
            },
        .log_epoch =
            [&](int epoch, const TrainStats& train, const EvalStats& eval, int world) {
              if (!log && !args.output_dir.empty())  // the main process died: its log goes on
                log.emplace((fs::path(args.output_dir) / "log.txt").string());
              log_and_save(args, epoch, train, eval, world, best_acc, *log, model, optimizer);
            }};
    test = train_surviving(context, start_epoch);
  }
  for (int epoch = start_epoch; epoch < args.epochs && !args.evaluate && !surviving; ++epoch) {
    train_sampler.set_epoch(static_cast<uint64_t>(epoch));
    nn::cosine_lr_schedule(optimizer, epoch, args.epochs, args.lr, args.min_lr);
    TrainStats train =
        train_one_epoch(ddp.get(), *train_model, optimizer, train_data, train_sampler, epoch, args);
    // Evaluation and checkpoints read the host model and optimizer.
    train_model->sync_to_host();
    test = evaluate_test_set(model_without_ddp, test_data, test_sampler, rank, world, args, group,
                             device);
    if (main_process)
      log_and_save(args, epoch, train, test, world, best_acc, *log, model_without_ddp, optimizer);
    if (args.distributed) barrier();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - job_start).count();
  if (!args.evaluate) print(str_cat("Training time ", format_eta(seconds)));
  print(str_cat("final test accuracy ", test.acc, " (best ", best_acc, ") on ", test.count,
                " test examples; ",
                args.output_dir.empty()
                    ? std::string("no files written (--evaluate without --output-dir)")
                    : "logs and checkpoints in " + fs::absolute(args.output_dir).string()));
  if (surviving) {  // every survivor: equal exactly when the replicas are bit-identical
    char sum[32];
    std::snprintf(sum, sizeof sum, "%016llx",
                  static_cast<unsigned long long>(state_checksum(model, optimizer)));
    print(force,
          str_cat("final state checksum ", sum, " rank ", get_rank(), " of ", get_world_size()));
  }
  // DDP gives the gradients back to the model before the model goes.
  ddp.reset();
  ddp_group.reset();
  train_model.reset();
  const bool tracing = timeline::enabled();
  if (args.distributed) destroy_process_group();  // writes the timeline (rank 0)
  timeline::finish();                             // alone: writes it
  if (tracing && trace != nullptr)
    print(str_cat("timeline written to ", fs::absolute(trace).string()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"blip_train: BLIP's distributed training loop on Fashion-MNIST (collie + DDP)"};
  app.add_option("--epochs", args.epochs, "epochs to train")->capture_default_str();
  app.add_option("--batch-size,--batch_size", args.batch_size, "batch size per rank")
      ->capture_default_str();
  app.add_option("--lr", args.lr, "initial learning rate (cosine schedule)")->capture_default_str();
  app.add_option("--min-lr,--min_lr", args.min_lr, "final learning rate")->capture_default_str();
  app.add_option("--weight-decay,--weight_decay", args.weight_decay, "AdamW weight decay")
      ->capture_default_str();
  app.add_option("--seed", args.seed, "seed (each rank adds its rank)")->capture_default_str();
  app.add_option("--output-dir,--output_dir", args.output_dir,
                 "log.txt, config.json, checkpoints (default: the --resume checkpoint's folder, "
                 "else output/blip_train; --evaluate writes files only here)");
  app.add_option("--resume", args.resume, "checkpoint to resume from");
  app.add_flag("--evaluate", args.evaluate, "only evaluate");
  app.add_flag("--overwrite", args.overwrite,
               "replace another run's log and checkpoints in --output-dir (without it such a "
               "folder is refused)");
  app.add_option("--dist-url,--dist_url", args.dist_url,
                 "init_method: env://, tcp://host:port, file:///path")
      ->capture_default_str();
  app.add_option("--backend", args.backend,
                 "cpu | nccl | auto (default: cpu for --device cpu, nccl for cuda; socket is cpu's "
                 "old name)")
      ->check(CLI::IsMember({"cpu", "socket", "nccl", "auto"}));
  app.add_option("--device", args.device, "cpu | cuda (the CUDA model, DDP over nccl)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--data-dir,--data_dir", args.data_dir, "Fashion-MNIST IDX files")
      ->capture_default_str();
  app.add_flag("--synthetic", args.synthetic, "synthetic data instead of Fashion-MNIST");
  app.add_option("--synthetic-size", args.synthetic_size, "synthetic training examples")
      ->capture_default_str();
  app.add_flag("--dist-eval,--dist_eval", args.dist_eval, "every rank evaluates its shard");
  app.add_option("--print-freq,--print_freq", args.print_freq, "progress line every N steps")
      ->capture_default_str();
  app.add_option("--max-steps", args.max_steps, "at most N steps per epoch (quick runs)");
  app.add_option("--hidden", args.hidden, "hidden layer sizes")->capture_default_str();
  app.add_flag("--survive-failures", args.survive_failures,
               "go on when a rank dies: the survivors shrink the group, take the furthest "
               "one's state and reshard the rest of the epoch (--device cpu; needs a store "
               "that outlives the rank: file://, or collie-run's agent store)");
  app.add_flag(
      "--join", args.join,
      "join a running --survive-failures job (collie-run's replacements: COLLIE_REPLACEMENT=1)");
  app.add_option("--kill-self-at", args.kill_self_at,
                 "tests: RANK:EPOCH:STEP|end|recover - that rank SIGKILLs itself before that "
                 "step of its epoch plan, before the epoch's end, or in the epoch's first "
                 "recovery once the group has shrunk; with --survive-failures")
      ->group("Testing");
  app.add_option("--trace", args.trace,
                 "write the job's timeline to FILE (Chrome trace / Perfetto JSON: every "
                 "collective, DDP's buckets, the steps; rank 0 writes it; as COLLIE_TRACE=FILE)");
  app.add_option("--timeout", args.timeout,
                 "bounds the rendezvous and every collective: 90 (seconds), 90s, 5m, 1h "
                 "(default: COLLIE_TIMEOUT, else 30m)");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "blip_train: error: %s\n", e.what());
    return 1;
  }
}
