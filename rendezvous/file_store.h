// FileStore: a Store kept in one file that several processes share, torch's
// c10d::FileStore. Useful where processes share a file system but not a
// network they can listen on (init_method file:///path).
//
// The file is an append-only log of records (FileStoreLog), each a key and a
// value written as a uint32 little-endian length followed by the bytes, which
// is the layout torch's FileStore writes: collie and torch processes can share
// one file.
// User keys are stored as "/key"; a deletion is a record "-/key" with an empty
// value (a tombstone); "refcount/" and "cleanup/" are the bookkeeping counters.
//
// Every operation takes an exclusive flock(2) on the file (and a mutex for
// threads sharing this object), reads the records appended since its last
// visit into an in-memory map, appends its own record and unlocks, so
// add/compare_set/append are atomic across processes. get/wait poll the file
// with a bounded back-off and never hold the lock while they wait.
//
// Lifetime: the constructor adds 1 to "refcount/", the destructor adds 1 to
// "cleanup/" and -1 to "refcount/". The process whose destructor brings the
// reference count to zero after world_size processes have finished removes the
// file. With world_size <= 0 (unknown, torch's -1) the file is never removed.
//
// A corrupt or truncated file (a record whose length runs past the end of
// the file or over the cap) gives a StoreError naming the path and offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collie/rendezvous/file_store_log.h"
#include "collie/rendezvous/store.h"

namespace collie {

struct FileStoreOptions {
  Timeout timeout = kDefaultTimeout;          // get/wait default and lock deadline
  size_t max_value_bytes = size_t{64} << 20;  // cap on any key or value, read or written
};

class FileStore : public Store {
 public:
  // Opens the file, creating it when missing. Throws StoreError naming the
  // path when it cannot be opened or holds corrupt records.
  FileStore(std::string path, int world_size, const FileStoreOptions& options = {});
  ~FileStore() override;

  void set(const std::string& key, std::span<const uint8_t> value) override;
  using Store::set;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, std::span<const uint8_t> expected,
                    std::span<const uint8_t> desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Timeout timeout = kUnsetTimeout) override;
  bool delete_key(const std::string& key) override;
  // User keys only, not the bookkeeping counters.
  int64_t num_keys() override;
  void append(const std::string& key, std::span<const uint8_t> value) override;
  // Waits for all keys, then reads them under one lock (a consistent snapshot).
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override;
  // All records in one write under one lock: other processes see all or none.
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;

  const std::string& path() const { return log_.path(); }
  int world_size() const { return world_size_; }

 private:
  int64_t add_locked(const std::string& raw_key, const std::string& shown_key, int64_t delta);
  // Polls until every key exists (then runs on_ready under the lock) or the
  // deadline passes (TimeoutError naming the missing keys).
  void poll_until_present(const std::vector<std::string>& keys, const Deadline& deadline,
                          const std::function<void()>& on_ready);

  int world_size_;
  FileStoreLog log_;
};

}  // namespace collie
