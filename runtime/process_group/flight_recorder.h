// The flight recorder: a fixed-size ring of the process's recent calls, on
// every group of every backend, always on. What torch's ProcessGroupNCCL
// keeps (c10d's FlightRecorder), for collie's backends:
//
//   * per call: the group (name, description, ranks), its sequence number
//     (collective_seq_id, or p2p_seq_id for send/recv), the op ("collie:
//     all_reduce", "collie:send 0->1"), dtypes and sizes, the reduce op or
//     root, the algorithm and transport, and when it was queued, started
//     and completed, or its error;
//   * a dump: one file per rank, <TORCH_FR_DUMP_TEMP_FILE><rank>, holding
//     the pickle torch's own recorder writes (version, pg_config, pg_status,
//     entries, with torch's field names and states), which torch's
//     analyser (`torchfrtrace <folder>`) reads; and a JSON "state" of the
//     same calls (each group's last completed and pending call, and how
//     long each has waited) in $COLLIE_FR_STATE_DIR/rank<rank>.json, which
//     collie-run reads to answer a live query and to analyse a hang.
//
// A dump is written on a collective's timeout or mismatch (the backend
// calls dump_on_failure(), which also asks every other rank of the job to
// dump, through the store), on SIGUSR2 (see install_dump_signal()), and on
// demand (dump_flight_recorder(), collie_torch.dump_flight_recorder()).
//
// Cost: recording a call writes one ring slot (no allocation, no lock) and
// reads the time stamp counter; completing it writes two more fields.
// Readers (dumps) copy a slot under its sequence count and skip one being
// rewritten (docs/performance.md, "Flight recorder").
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collie/base/types.h"
#include "collie/rendezvous/store.h"

namespace collie {

// What one call is. Every field is a value or a string literal: filling it
// allocates nothing.
// (64 bytes: the fields are ordered so that it has no padding.)
struct FrCall {
  const char* op = "";                       // torch's op name: "all_reduce", "send", "barrier"...
  const char* algorithm = "";                // "ring", "small", "nccl"...
  const char* transport = "";                // "shm", "tcp", "nccl"...
  int64_t in_numel = 0, out_numel = 0;       // elements per tensor
  uint32_t in_tensors = 0, out_tensors = 0;  // how many tensors each side has
  int peer = -1;                             // send: the destination; recv: the source (-1: any)
  int root = -1;                             // broadcast/reduce/gather/scatter
  int reduce_op = -1;                        // a ReduceOp's value, or -1
  DataType in_dtype = DataType::kFloat32, out_dtype = DataType::kFloat32;
  bool p2p = false;  // send/recv: numbered by p2p_seq_id
};

// One group as the recorder knows it (torch's pg_config entry).
struct FrGroupInfo {
  std::string name;               // "0", "1"... (torch's group names)
  std::string desc;               // "default_pg", "undefined", a user's
  std::vector<int> global_ranks;  // members' ranks in the world, by group rank
  std::string backend;            // "cpu", "nccl", "collie" (profiling names' prefix)
  int rank = -1;                  // this process's rank in the group
};

// States, as torch names them.
enum class FrState : uint8_t { kScheduled = 0, kStarted = 1, kCompleted = 2, kFailed = 3 };

// A copy of one entry, for dumps and tests.
struct FrEntry {
  uint64_t record_id = 0;
  int pg_id = -1;
  uint64_t collective_seq_id = 0, p2p_seq_id = 0, op_id = 0;
  FrCall call;
  FrState state = FrState::kScheduled;
  int64_t time_created_ns = 0;    // CLOCK_REALTIME
  int64_t time_started_ns = 0;    // 0: not started
  int64_t time_completed_ns = 0;  // 0: not completed (or failed)
  int64_t timeout_ms = 0;
  std::string error;   // kFailed: the error's message
  bool timed = false;  // its times are precise (timing on), not the kernel tick's
};

class FlightRecorder {
 public:
  // The process's recorder. Its capacity is COLLIE_FR_BUFFER_SIZE, else
  // TORCH_FR_BUFFER_SIZE, else 2000 entries, rounded up to a power of two
  // (2048); 0 turns it off.
  static FlightRecorder& get();
  explicit FlightRecorder(size_t capacity);
  ~FlightRecorder();

  // Replaces the ring (tests, InitOptions::flight_recorder_entries); entries
  // already recorded are dropped. Not while calls are being recorded.
  void reset(size_t capacity);
  size_t capacity() const { return capacity_; }
  // Timing: whether calls recorded from now on read a precise clock (the
  // time stamp counter: 15 ns a read in a VM) for their times and durations,
  // instead of the kernel's coarse one (1-4 ms steps, 5 ns a read), which
  // is enough to say how long a call has waited. Off by default, as torch's
  // TORCH_NCCL_ENABLE_TIMING; COLLIE_FR_ENABLE_TIMING=1 (or torch's) and an
  // observer (the timeline) turn it on.
  void set_timing(bool on) { timing_.store(on, std::memory_order_relaxed); }
  bool timing() const { return timing_.load(std::memory_order_relaxed); }
  bool enabled() const { return capacity_ > 0; }

  // A group's id in the entries (pg_id). Called once per group; groups are
  // never forgotten (their entries outlive them in the ring).
  int register_group(FrGroupInfo info);
  // This process's rank in the world (names the dump file); -1 unknown.
  void set_global_rank(int rank) { global_rank_.store(rank, std::memory_order_relaxed); }
  int global_rank() const { return global_rank_.load(std::memory_order_relaxed); }
  // The default group's size (the first group's when none is "default_pg").
  int world_size() const;

  // Records a call of group `pg_id` as scheduled (`running`: started, at
  // its issue: a blocking call run on the caller's thread) and returns its
  // id (0 when the recorder is off). Each group's calls are numbered in
  // issue order: record() must be called in the order the group's calls
  // are issued, one at a time.
  uint64_t record(int pg_id, const FrCall& call, int64_t timeout_ms, bool running = false);
  // The call started running (not needed when it ran as soon as issued:
  // completed() marks it started too).
  void started(uint64_t id);
  void completed(uint64_t id);
  void failed(uint64_t id, const std::string& error);

  // Copies of the entries still in the ring, oldest first.
  std::vector<FrEntry> entries() const;
  std::vector<FrGroupInfo> groups() const;

  // torch's dump: the pickle torch's FlightRecorder::dump_entries() writes.
  std::string dump_pickle(bool include_collectives = true, bool only_active = false) const;
  // The live state: per group, the last completed and the pending calls, and
  // how long each has waited, as JSON.
  std::string state_json() const;

  // Writes <TORCH_FR_DUMP_TEMP_FILE><rank> (default /tmp/collie_trace_rank_)
  // and, when COLLIE_FR_STATE_DIR is set, <dir>/rank<rank>.json. Returns the
  // pickle's path ("" when the recorder is off). Thread-safe.
  std::string dump_to_files(const std::string& why) const;

 private:
  struct Slot;
  struct Group;
  Slot* slot_for(uint64_t id) const;

  size_t capacity_ = 0;
  std::atomic<bool> timing_{false};
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> next_id_{0};
  std::atomic<int> global_rank_{-1};
  mutable std::atomic<int> group_count_{0};
  std::unique_ptr<Group[]> groups_;  // fixed table, kMaxGroups
};

// Dumps this process's recorder now (C++'s on-demand dump); returns the
// pickle's path.
std::string dump_flight_recorder(const std::string& why = "on demand");

// A collective failed (timeout, mismatch, a broken peer): dumps this
// process's recorder (at most once in kFailureDumpInterval) and asks every
// other rank watching the same store (watch_for_dump_requests) to dump too.
// `wait_for_others`: a timeout, where the others are alive and one of them
// may be hung outside any call: wait (at most 1.5 s, not under collie-run)
// for their dumps before this rank fails. Other failures (a lost peer, a
// mismatch) fail the others too, and each dumps on its own.
void dump_on_failure(const std::string& why, bool wait_for_others = false);

// Starts the process's dump thread (once; register_group() does): SIGUSR2
// dumps (installed only when the program has no handler of its own).
void install_dump_signal();
// The dump thread also polls `store` (every group's first group registers
// its store: the default group's) about once a second for another rank's
// dump_on_failure() request. The first store given wins.
void watch_for_dump_requests(std::shared_ptr<Store> store);

// Listeners a dump also runs (collie_torch under torch 2.15 registers one
// that dumps torch's own recorder, which then writes the pickle instead of
// collie's). Thread-safe; returns an id for remove_dump_listener.
int add_dump_listener(std::function<void()> listener);
void remove_dump_listener(int id);

// Called when any recorded call completes or fails, when set (the
// timeline, runtime/process_group/timeline.h); null by default, so that
// recording costs one relaxed load for it. start_ns/end_ns: CLOCK_REALTIME.
using FrObserver = void (*)(const FrGroupInfo& group, const FrCall& call, uint64_t seq,
                            int64_t start_ns, int64_t end_ns, bool ok);
void set_fr_observer(FrObserver observer);
FrObserver detail_fr_observer();

// torch's names: "Float", "Double", "Half", "BFloat16", "Int", "Long",
// "Byte", "Char", "Bool".
const char* torch_dtype_name(DataType dtype);

}  // namespace collie
