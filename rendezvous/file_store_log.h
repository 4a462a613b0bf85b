// FileStoreLog: the on-disk half of FileStore. An append-only file of
// records, each a key and a value written as a uint32 little-endian length
// followed by the bytes (torch's FileStore layout), replayed into an
// in-memory map. A record whose key starts with "-" is a tombstone: it
// erases the key that follows the "-".
//
// Readers and writers exclude each other with an exclusive flock(2), taken
// through Lock; refresh(), append() and entries() need one. Every length read
// is checked against the bytes left in the file and against a cap before
// anything is allocated, so a corrupt file is a StoreError naming the path and
// the record's offset, never a crash or a huge allocation.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collie/base/unique_fd.h"
#include "collie/rendezvous/store.h"

namespace collie {

class FileStoreLog {
 public:
  using Record = std::pair<std::string, Bytes>;
  static constexpr std::string_view kTombstonePrefix = "-";

  // Opens the file, creating it when missing; throws StoreError naming the
  // path when it cannot.
  FileStoreLog(std::string path, size_t max_field_bytes);
  FileStoreLog(const FileStoreLog&) = delete;
  FileStoreLog& operator=(const FileStoreLog&) = delete;

  // Holds the log's mutex (threads of one process share one open file
  // description, on which flock would not exclude them) and then the flock.
  // The flock is tried with LOCK_NB and a back-off until the deadline, so
  // even the lock has one: TimeoutError naming the file.
  class Lock {
   public:
    Lock(FileStoreLog& log, const Deadline& deadline);
    ~Lock();
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    FileStoreLog& log_;
    std::lock_guard<std::mutex> guard_;
  };

  // Replays the records appended since the last call. Needs a Lock.
  void refresh();
  // Appends the records in one write (all or none become visible) and
  // applies them to entries(). Needs a Lock, after refresh(). Throws
  // InvalidArgument for a key or value over the cap.
  void append(const std::vector<Record>& records);
  // Key -> value as of the last refresh()/append().
  const std::unordered_map<std::string, Bytes>& entries() const { return entries_; }

  // Whether the file changed since the last refresh(); needs no flock, so a
  // poller can skip locking while nothing happens.
  bool grew();
  // Removes the file (under a Lock, so nobody appends in between).
  void remove_file();

  const std::string& path() const { return path_; }

 private:
  void apply(std::string key, Bytes value);
  Bytes read_field(uint64_t record, uint64_t& at, uint64_t size, const char* what);
  void read_exact(uint64_t at, void* buf, size_t n, uint64_t record);
  [[noreturn]] void corrupt(uint64_t offset, const std::string& what) const;

  std::string path_;
  size_t max_field_bytes_;
  UniqueFd fd_;
  std::mutex mu_;
  uint64_t offset_ = 0;  // how far into the file entries_ reflects
  std::unordered_map<std::string, Bytes> entries_;
};

}  // namespace collie
