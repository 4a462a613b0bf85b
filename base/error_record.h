// A failure as data: the structured error record a failing rank leaves for
// its launcher, in the file torchrun's convention names
// (TORCHELASTIC_ERROR_FILE). The record keeps torchrun's JSON shape,
//
//   {"message": {"message": "TimeoutError: ...",
//                "extraInfo": {"py_callstack": "...", "timestamp": "1733500000"}},
//    "collie": {"rank": 1, "group": "socket/0", "cause": "timeout_unresponsive",
//               "culprits": [{"rank": 2, "global_rank": 2, "address": "10.0.0.3:4711"}],
//               ...}}
//
// so that torchrun's agent (and its tooling) reads collie's record as one of
// its own, and adds collie's fields under "collie": who failed, in which
// call, why (a cause kind, not a sentence) and whom the failure blames.
// collie-run builds its verdict from these fields, never from the text of
// an error message (docs/launcher.md, "Failures as data").
//
// First failure wins: a process keeps its first record. A later error in
// the same process is usually a consequence of the first (the broken group
// refusing the next call), and must not replace the root cause. A file
// that exists before the process's first record (left by an earlier
// process) is replaced, as torchrun's error handler does.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace collie {

// Why a rank failed. The launcher blames a rank only on the evidence of
// kTimeoutUnresponsive (alive peers answered a timeout probe, the culprits
// did not); the other kinds name a peer for the reader.
enum class FailureCause {
  kUnknown,              // a record of another writer (torch's own), or an unknown kind
  kTimeoutUnresponsive,  // a timeout; the culprits did not answer the timeout probe
  kTimeout,              // a timeout with no rank found silent
  kPeerClosed,           // the culprit's connection closed (it exited or crashed)
  kPeerFailed,           // a peer failed first and said so (its abort notice)
  kMismatch,             // the culprit called a different collective, or another size
  kNetwork,              // a socket error
  kAborted,              // abort() was called on the communicator
  kBackend,              // any other error of the backend
};

// "timeout_unresponsive", "peer_closed", ...; parse_failure_cause() is its
// inverse (kUnknown for any other text).
std::string_view failure_cause_name(FailureCause cause);
FailureCause parse_failure_cause(std::string_view name);

// A rank a failure blames: its rank in the failing group, its rank in the
// job when known (-1: unknown) and its address.
struct FailureCulprit {
  int rank = -1;
  int global_rank = -1;
  std::string address;
};

struct ErrorRecord {
  std::string error_type = "Error";  // the exception's class: "TimeoutError"
  std::string message;               // what the exception says, word for word
  FailureCause cause = FailureCause::kUnknown;
  int global_rank = -1;  // this process's rank in the job (-1: unknown)
  int group_rank = -1;   // its rank in the failing group
  int group_size = -1;
  std::string group;  // the group's name ("socket/0")
  std::string call;   // "all_reduce(float32, 1024, sum)"
  int64_t seq = -1;   // the call's sequence number (-1: none)
  std::vector<FailureCulprit> culprits;
  std::chrono::system_clock::time_point time{};
  int64_t pid = 0;

  // The global ranks of the culprits that have one, ascending, without
  // this rank.
  std::vector<int> culprit_ranks() const;
};

// The record as torchrun's JSON with collie's fields under "collie".
std::string error_record_json(const ErrorRecord& record);
// Any record in torchrun's shape (collie's, or torch's own: then cause is
// kUnknown and only the message and the time are known); nullopt for text
// that is not one.
std::optional<ErrorRecord> parse_error_record(std::string_view json);
// The record in the file at `path`; nullopt when there is none or it is no
// record (a half-written file cannot be: writers rename a whole file in).
std::optional<ErrorRecord> read_error_record(const std::string& path);

// One error file. Thread-safe.
class ErrorFile {
 public:
  explicit ErrorFile(std::string path) : path_(std::move(path)) {}

  // Writes `record` unless this object wrote one before (first failure
  // wins); fills in what the record leaves unset: the time, the pid, and
  // fill_from_environment()'s ranks. Returns whether it wrote. An empty
  // path writes nothing. Never throws: failing to record a failure must
  // not hide the failure.
  bool record(ErrorRecord record);
  bool recorded() const;
  const std::string& path() const { return path_; }

  // The process's error file: TORCHELASTIC_ERROR_FILE, read once (unset or
  // empty: records go nowhere).
  static ErrorFile& process();

 private:
  std::string path_;
  mutable std::mutex mu_;
  bool written_ = false;
};

// What the environment says of ranks the record leaves unset (-1): the
// process's global rank from RANK, and the culprits' global ranks when the
// failing group spans the whole job (group_size == WORLD_SIZE, so group
// ranks are job ranks: torch's new_group sorts its ranks).
void fill_from_environment(ErrorRecord& record);

// ErrorFile::process().record(record).
bool record_failure(ErrorRecord record);

}  // namespace collie
