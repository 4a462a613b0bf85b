// The ProcessGroup contract suite: the same cases on every backend. Each
// ctest entry is one of these cases on one backend (test/runtime/contract/
// CMakeLists.txt registers the suite once per backend and channel:
// "contract cpu/tcp", "contract cpu/shm", "contract nccl").
// Every rank is a process that initializes the default group through the
// public API (file:// rendezvous) and checks its own results against a
// local reference, bit for bit (contract_ops.h); the error cases check the
// exception's type and that its message names the culprit.
//
// On NCCL each rank takes the GPU of its rank: a world larger than the
// visible GPUs is skipped (exit 77), and so is everything without a GPU.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/file_store.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/runtime/contract/buffers.h"
#include "collie/test/runtime/contract/contract_ops.h"
#include "collie/test/support/child.h"
#include "collie/test/support/reference.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

// The culprit of the fault cases.
constexpr int kCulprit = 2;

void init_rank(const std::vector<std::string>& args, const ContractBackend& backend,
               Timeout timeout) {
  InitOptions o;
  o.backend = backend.init_backend;
  o.init_method = "file://" + args.at(0);
  o.world_size = std::stoi(args.at(1));
  o.rank = std::stoi(args.at(2));
  o.timeout = timeout;
  o.transport = backend.transport;
  init_process_group(o);
  if (backend.on_gpu) use_gpu(o.rank);
}

// The object collectives (byte strings, through the public API) on `group`,
// including empty and binary objects.
void objects(const Group& group, const std::string& label) {
  const int rank = get_rank(group), size = get_world_size(group);
  const auto object_of = [](int r) {
    return std::string(static_cast<size_t>(r) * 37, 'a' + r) + std::string(1, '\0') + "#" +
           std::to_string(r);
  };
  const auto fail = [&](const std::string& what) {
    throw std::runtime_error(str_cat(what, " [rank ", rank, " of ", size, ", ", label, "]"));
  };
  const std::vector<int>& members = group.global_ranks();
  const auto global = [&](int r) { return members.empty() ? r : members[static_cast<size_t>(r)]; };
  const int root = size - 1;
  std::string o = object_of(rank);
  broadcast_object(o, global(root), group);
  if (o != object_of(root)) fail("broadcast_object");
  auto all = all_gather_object(object_of(rank), group);
  for (int p = 0; p < size; ++p)
    if (all.at(static_cast<size_t>(p)) != object_of(p)) fail(str_cat("all_gather_object ", p));
  auto gathered = gather_object(object_of(rank), global(root), group);
  if (rank == root) {
    for (int p = 0; p < size; ++p)
      if (gathered.at(static_cast<size_t>(p)) != object_of(p)) fail("gather_object");
  } else if (!gathered.empty()) {
    fail("gather_object off the root returned objects");
  }
  std::vector<std::string> parts;
  if (rank == 0)
    for (int p = 0; p < size; ++p) parts.push_back(p == 1 ? std::string() : object_of(p + 10));
  const std::string part = scatter_object(parts, global(0), group);
  if (part != (rank == 1 ? std::string() : object_of(rank + 10))) fail("scatter_object");
}

// Every op on the default group, then on two sub-groups from new_group:
// every other rank counted from the top (group ranks in a different order
// from the default group's) and every rank but 0 (so each root is a
// non-zero default-group rank).
COLLIE_TEST_CHILD(contract_matrix) {
  const ContractBackend backend = contract_backend();
  init_rank(args, backend, 300s);
  const int rank = get_rank(), world = get_world_size();
  uint64_t calls =
      run_op_matrix(*get_default_group(), backend, MatrixOptions{.label = "default group"});
  objects(Group{}, "default group");

  std::vector<int> odd, all_but_0;
  for (int r = world - 1; r >= 0; r -= 2) odd.push_back(r);
  for (int r = 1; r < world; ++r) all_but_0.push_back(r);
  if (all_but_0.empty()) all_but_0.push_back(0);
  const MatrixOptions sub{.dtypes = {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64,
                                     DataType::kUInt8, DataType::kBool},
                          .large = false};
  for (const auto& [members, label] :
       {std::pair{odd, std::string("new_group(every other rank)")},
        std::pair{all_but_0, std::string("new_group(all but rank 0)")}}) {
    Group g = new_group(members);
    if (!g.is_member()) continue;
    MatrixOptions o = sub;
    o.label = label;
    const auto& pg = g.process_group() ? g.process_group() : get_default_group();
    calls += run_op_matrix(*pg, backend, o);
    objects(g, label);
  }
  barrier();
  destroy_process_group();
  std::printf("contract ok on rank %d of %d: %llu calls checked\n", rank, world,
              static_cast<unsigned long long>(calls));
  return 0;
}

// Rank 0 sends rank 1 a message of 4 GiB + 64 bytes (more than one frame
// holds), with an irecv posted first on rank 1 and a small message of the
// same tag after it; rank 1 checks every byte's pattern.
COLLIE_TEST_CHILD(contract_huge_p2p) {
  const ContractBackend backend = contract_backend();
  init_rank(args, backend, 300s);
  const int rank = get_rank();
  const size_t bytes = (size_t{1} << 32) + 64;
  std::vector<uint8_t> big(bytes);
  auto pattern = [](size_t i) { return static_cast<uint8_t>((i * 2654435761u) >> 13); };
  std::vector<float> small(3, rank == 0 ? 7.0f : 0.0f);
  auto pg = get_default_group();
  if (rank == 0) {
    for (size_t i = 0; i < bytes; ++i) big[i] = pattern(i);
    pg->send(TensorView{big.data(), bytes, DataType::kUInt8}, 1, P2POptions{4})->wait();
    pg->send(TensorView{small.data(), 3, DataType::kFloat32}, 1, P2POptions{4})->wait();
  } else {
    auto q = pg->recv(TensorView{big.data(), bytes, DataType::kUInt8}, 0, P2POptions{4});
    auto q2 = pg->recv(TensorView{small.data(), 3, DataType::kFloat32}, 0, P2POptions{4});
    q->wait();
    q2->wait();
    for (size_t i = 0; i < bytes; ++i)
      if (big[i] != pattern(i))
        throw std::runtime_error(str_cat("byte ", i, " of the 4 GiB + 64 B message is ",
                                         int{big[i]}, ", not ", int{pattern(i)}));
    if (small[0] != 7.0f || small[2] != 7.0f)
      throw std::runtime_error("the message after the large one did not arrive whole");
  }
  barrier();
  destroy_process_group();
  std::printf("huge p2p ok on rank %d\n", rank);
  return 0;
}

// Prints the outcome of fn as "caught <Type>: <message>" or "no error".
void report(const char* what, const std::function<void()>& fn) {
  try {
    fn();
    std::printf("%s: no error\n", what);
  } catch (const TimeoutError& e) {
    std::printf("%s: caught TimeoutError: %s\n", what, e.what());
  } catch (const NetworkError& e) {
    std::printf("%s: caught NetworkError: %s\n", what, e.what());
  } catch (const BackendError& e) {
    std::printf("%s: caught BackendError: %s\n", what, e.what());
  } catch (const InvalidArgument& e) {
    std::printf("%s: caught InvalidArgument: %s\n", what, e.what());
  } catch (const std::exception& e) {
    std::printf("%s: caught other: %s\n", what, e.what());
  }
  std::fflush(stdout);
}

// The error cases, one per process launch: args[3] names it.
//  sizes:    wrong shapes and arguments, refused on the rank that made them,
//            the group still usable afterwards;
//  mismatch: rank kCulprit passes a different count to all_reduce;
//  timeout:  rank kCulprit stops itself (SIGSTOP) before a collective the
//            others enter with a 1 s limit;
//  killed:   rank kCulprit dies (SIGKILL) before a collective.
COLLIE_TEST_CHILD(contract_fault) {
  const ContractBackend backend = contract_backend();
  const std::string kind = args.at(3);
  init_rank(args, backend, kind == "timeout" || kind == "killed" ? 20s : 60s);
  auto pg = get_default_group();
  const int rank = get_rank(), world = get_world_size();
  // Check-ins beside the rendezvous file: a rank that exits while another
  // still reads its last message may take that message with it (the kernel
  // resets the connection), so nobody leaves, and no culprit stops or dies,
  // before the others are where the case needs them.
  FileStore sync(args.at(0) + ".sync", world, {.timeout = 60s});
  const auto others_reached = [&](const std::string& step) {
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r)
      if (r != rank && (r != kCulprit || kind == "sizes" || kind == "mismatch"))
        keys.push_back(str_cat(step, "/", r));
    sync.add(str_cat(step, "/", rank), 1);
    sync.wait(keys);
  };
  const auto data = make_data(DataType::kFloat32, 64, rank, ReduceOp::kSum);
  Buffer t(data, DataType::kFloat32, backend.on_gpu);
  pg->all_reduce(t.view())->wait();  // everyone is up, communicators too
  if (kind == "sizes") {
    Buffer small(make_data(DataType::kFloat32, 3, rank, ReduceOp::kSum), DataType::kFloat32,
                 backend.on_gpu);
    Buffer ints(make_data(DataType::kInt32, 64, rank, ReduceOp::kSum), DataType::kInt32,
                backend.on_gpu);
    report("all_gather output too small", [&] { pg->all_gather(small.view(), t.view()); });
    report("reduce_scatter input too small", [&] { pg->reduce_scatter(t.view(), small.view()); });
    report("all_gather dtypes differ", [&] { pg->all_gather(ints.view(), t.view(0, 1)); });
    report("broadcast root out of range", [&] { pg->broadcast(t.view(), {.root = world}); });
    const std::vector<size_t> bad_splits(static_cast<size_t>(world), 1);
    report("all_to_all_single splits do not add up",
           [&] { pg->all_to_all_single(t.view(), t.view(), bad_splits, bad_splits); });
    report("send to itself", [&] { pg->send(t.view(), rank); });
    report("avg on int32", [&] { pg->all_reduce(ints.view(), {.op = ReduceOp::kAvg}); });
    pg->all_reduce(t.view())->wait();
    std::printf("group still works\n");
  } else if (kind == "mismatch") {
    Buffer mine(make_data(DataType::kFloat32, rank == kCulprit ? 65 : 64, rank, ReduceOp::kSum),
                DataType::kFloat32, backend.on_gpu);
    report("mismatched all_reduce", [&] {
      pg->all_reduce(mine.view())->wait();
      pg->barrier()->wait();  // a rank whose part only sent learns it here
    });
  } else if (kind == "timeout" || kind == "killed") {
    // The culprit goes only once every survivor has finished the warm-up.
    if (rank == kCulprit) {
      std::vector<std::string> keys;
      for (int r = 0; r < world; ++r)
        if (r != kCulprit) keys.push_back(str_cat("warm/", r));
      sync.wait(keys);
      std::printf("culprit pid %d\n", static_cast<int>(getpid()));
      std::fflush(stdout);
      ::raise(kind == "timeout" ? SIGSTOP : SIGKILL);
      return 0;  // the test kills a stopped culprit; it never gets here
    }
    sync.add(str_cat("warm/", rank), 1);
    AllReduceOptions o;
    if (kind == "timeout") o.timeout = 1s;
    report(kind == "timeout" ? "all_reduce with a stopped peer" : "all_reduce with a dead peer",
           [&] { pg->all_reduce(t.view(), o)->wait(); });
  }
  std::fflush(stdout);
  others_reached("done");
  std::_Exit(0);  // a broken group's shutdown would wait for the lost peer
}

std::vector<Subprocess> spawn(int world, const std::string& child, const TempDir& dir,
                              const std::string& extra = "") {
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < world; ++rank) {
    SpawnOptions o;
    for (const char* name :
         {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
          "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"})
      o.env.try_emplace(name, std::nullopt);
    o.env["LOCAL_RANK"] = std::to_string(rank);  // NCCL's device
    std::vector<std::string> args{dir.file("rdzv"), std::to_string(world), std::to_string(rank)};
    if (!extra.empty()) args.push_back(extra);
    procs.push_back(Subprocess::spawn(child_argv(child, args), o));
  }
  return procs;
}

std::string describe(std::vector<Subprocess>& procs, const std::vector<ExitStatus>& status) {
  std::string report;
  for (size_t r = 0; r < procs.size(); ++r)
    report += str_cat("--- rank ", r, ": ", status[r].describe(), "\nstdout:\n", procs[r].out(),
                      "stderr:\n", procs[r].err(), "\n");
  return report;
}

// Skips what this backend cannot run here: NCCL without a GPU for each rank.
void require_backend(int world) {
  const ContractBackend backend = contract_backend();
  if (!backend.on_gpu) return;
  const int gpus = visible_gpus();
  if (gpus == 0) skip_gpu_test("the nccl contract needs a CUDA device; none is visible here");
  if (gpus < world)
    skip_gpu_test(str_cat("world size ", world, " needs one GPU per rank; ", gpus, " visible"));
}

void run_matrix(int world) {
  require_backend(world);
  TempDir dir;
  auto procs = spawn(world, "contract_matrix", dir);
  std::vector<ExitStatus> status;
  for (auto& p : procs) status.push_back(p.wait(600s));
  INFO(describe(procs, status));
  for (int r = 0; r < world; ++r) {
    CHECK(status[static_cast<size_t>(r)].ok());
    CHECK_THAT(procs[static_cast<size_t>(r)].out(),
               Contains(str_cat("contract ok on rank ", r, " of ", world)));
  }
}

// One launch of the contract_fault case `kind` on 3 ranks: each rank's
// stdout and exit status, and a report of everything for failures. A
// stopped culprit (kind "timeout") is killed once the others have exited.
struct FaultRun {
  std::vector<std::string> out;
  std::vector<ExitStatus> status;
  std::string report;
};

FaultRun run_fault(const std::string& kind) {
  constexpr int kWorld = 3;
  require_backend(kWorld);
  TempDir dir;
  auto procs = spawn(kWorld, "contract_fault", dir, kind);
  const bool stops = kind == "timeout";
  if (stops) procs[kCulprit].wait_for_output("culprit pid", 60s);
  std::vector<ExitStatus> status(kWorld);
  for (int r = 0; r < kWorld; ++r)
    if (!stops || r != kCulprit)
      status[static_cast<size_t>(r)] = procs[static_cast<size_t>(r)].wait(120s);
  if (stops) {
    procs[kCulprit].kill(SIGKILL);
    status[kCulprit] = procs[kCulprit].wait(30s);
  }
  FaultRun run{{}, status, describe(procs, status)};
  for (auto& p : procs) run.out.push_back(p.out());
  return run;
}

}  // namespace

// World sizes 1-8: the whole matrix on the default group and two sub-groups.
#define CONTRACT_WORLD(n) \
  TEST_CASE("every op x dtype x reduce op at world size " #n) { run_matrix(n); }
CONTRACT_WORLD(1)
CONTRACT_WORLD(2)
CONTRACT_WORLD(3)
CONTRACT_WORLD(4)
CONTRACT_WORLD(5)
CONTRACT_WORLD(6)
CONTRACT_WORLD(7)
CONTRACT_WORLD(8)

TEST_CASE("a point-to-point message over 4 GiB arrives whole") {
  const ContractBackend backend = contract_backend();
  if (backend.on_gpu)
    skip_gpu_test("messages over 4 GiB are the cpu backend's case (NCCL's are device buffers)");
  require_backend(2);
  TempDir dir;
  auto procs = spawn(2, "contract_huge_p2p", dir);
  std::vector<ExitStatus> status;
  for (auto& p : procs) status.push_back(p.wait(600s));
  INFO(describe(procs, status));
  for (int r = 0; r < 2; ++r) {
    CHECK(status[static_cast<size_t>(r)].ok());
    CHECK_THAT(procs[static_cast<size_t>(r)].out(), Contains(str_cat("huge p2p ok on rank ", r)));
  }
}

TEST_CASE("wrong sizes and arguments are refused naming the rank and the sizes") {
  const FaultRun run = run_fault("sizes");
  INFO(run.report);
  for (int r = 0; r < 3; ++r) {
    const std::string& out = run.out[static_cast<size_t>(r)];
    const std::string on_rank = str_cat(" on rank ", r);
    CHECK(run.status[static_cast<size_t>(r)].ok());
    CHECK_THAT(out, Contains("all_gather output too small: caught InvalidArgument: all_gather" +
                             on_rank) &&
                        Contains("192") && Contains("3"));
    CHECK_THAT(out, Contains("reduce_scatter input too small: caught InvalidArgument: "
                             "reduce_scatter" +
                             on_rank));
    CHECK_THAT(out, Contains("all_gather dtypes differ: caught InvalidArgument") &&
                        Contains("int32") && Contains("float32"));
    CHECK_THAT(
        out, Contains("broadcast root out of range: caught InvalidArgument: broadcast" + on_rank) &&
                 Contains("root 3"));
    CHECK_THAT(out, Contains("all_to_all_single splits do not add up: caught InvalidArgument"));
    CHECK_THAT(out, Contains("send to itself: caught InvalidArgument: send" + on_rank));
    CHECK_THAT(out, Contains("avg on int32: caught InvalidArgument") && Contains("avg") &&
                        Contains("int32"));
    CHECK_THAT(out, Contains("group still works"));
  }
}

TEST_CASE("a call mismatched across ranks fails on every rank, naming the mismatch") {
  const FaultRun run = run_fault("mismatch");
  INFO(run.report);
  for (int r = 0; r < 3; ++r) {
    const std::string& out = run.out[static_cast<size_t>(r)];
    CHECK(run.status[static_cast<size_t>(r)].ok());
    CHECK_THAT(out, Contains("mismatched all_reduce: caught") && Contains("mismatch"));
    // The culprit and both calls are named.
    CHECK_THAT(out, Contains(str_cat("rank ", kCulprit, " called all_reduce(float32, 65")) &&
                        Contains("all_reduce(float32, 64"));
  }
}

TEST_CASE("a stopped peer gives TimeoutError naming it") {
  const FaultRun run = run_fault("timeout");
  INFO(run.report);
  for (int r = 0; r < 3; ++r) {
    if (r == kCulprit) continue;
    const std::string& out = run.out[static_cast<size_t>(r)];
    CHECK(run.status[static_cast<size_t>(r)].ok());
    CHECK_THAT(out, Contains("all_reduce with a stopped peer: caught TimeoutError"));
    CHECK_THAT(out, Contains(str_cat("rank ", kCulprit)));
  }
}

TEST_CASE("a killed peer gives NetworkError or BackendError naming it") {
  const FaultRun run = run_fault("killed");
  INFO(run.report);
  CHECK(run.status[kCulprit].signal == SIGKILL);
  for (int r = 0; r < 3; ++r) {
    if (r == kCulprit) continue;
    const std::string& out = run.out[static_cast<size_t>(r)];
    CHECK(run.status[static_cast<size_t>(r)].ok());
    CHECK_THAT(out, Contains("all_reduce with a dead peer: caught NetworkError") ||
                        Contains("all_reduce with a dead peer: caught BackendError"));
    CHECK_THAT(out, Contains(str_cat("rank ", kCulprit)));
  }
}
