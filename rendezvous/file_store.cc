#include "collie/rendezvous/file_store.h"

#include <algorithm>
#include <thread>

#include "collie/base/backoff.h"
#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/store_util.h"

namespace collie {
namespace {

using Lock = FileStoreLog::Lock;

// torch's FileStore key spaces: user keys live under "/", a tombstone is "-"
// followed by the raw key, and the two lifetime counters sit outside both.
constexpr std::string_view kUserPrefix = "/";
const std::string kRefCountKey = "refcount/";
const std::string kCleanupKey = "cleanup/";

// get/wait re-read the file after 1 ms, then back off to at most 50 ms, so a
// waiter notices a set quickly without spinning on the lock.
constexpr auto kFirstPoll = std::chrono::microseconds(1000);
constexpr auto kMaxPoll = std::chrono::microseconds(50000);
// The destructor must not hang a process exit on a wedged peer.
constexpr Timeout kCloseLockLimit = std::chrono::seconds(60);

std::string raw_key(const std::string& key) { return std::string(kUserPrefix) + key; }

std::string checked_path(std::string path) {
  COLLIE_ARG_CHECK(!path.empty(), "FileStore needs a path");
  return path;
}

}  // namespace

FileStore::FileStore(std::string path, int world_size, const FileStoreOptions& options)
    : Store(options.timeout),
      world_size_(world_size),
      log_(checked_path(std::move(path)), options.max_value_bytes) {
  Lock lock(log_, Deadline(timeout_));
  log_.refresh();
  add_locked(kRefCountKey, kRefCountKey, 1);
}

FileStore::~FileStore() {
  try {
    Lock lock(log_, Deadline(std::min(timeout_, kCloseLockLimit)));
    log_.refresh();
    int64_t finished = add_locked(kCleanupKey, kCleanupKey, 1);
    int64_t references = add_locked(kRefCountKey, kRefCountKey, -1);
    // Removed under the lock, so nobody appends between the decision and the
    // unlink.
    if (references <= 0 && world_size_ > 0 && finished >= world_size_) log_.remove_file();
  } catch (const std::exception& e) {
    COLLIE_LOG(kWarn) << "FileStore " << path() << ": leaving without cleaning up: " << e.what();
  }
}

int64_t FileStore::add_locked(const std::string& raw, const std::string& shown, int64_t delta) {
  const auto& entries = log_.entries();
  auto it = entries.find(raw);
  const int64_t value = add_counter(shown, it == entries.end() ? nullptr : &it->second, delta);
  log_.append({{raw, to_bytes(std::to_string(value))}});
  return value;
}

void FileStore::poll_until_present(const std::vector<std::string>& keys, const Deadline& deadline,
                                   const std::function<void()>& on_ready) {
  std::vector<std::string> raw;
  raw.reserve(keys.size());
  for (const auto& k : keys) raw.push_back(raw_key(k));
  std::vector<std::string> missing;
  Backoff backoff({.initial = kFirstPoll, .max = kMaxPoll});
  for (bool first = true;; first = false) {
    // Nothing can have appeared unless the file grew, and seeing that needs
    // no flock: only lock when there is something new to read.
    if (first || log_.grew()) {
      Lock lock(log_, deadline);
      log_.refresh();
      missing.clear();
      for (size_t i = 0; i < keys.size(); ++i)
        if (!log_.entries().contains(raw[i])) missing.push_back(keys[i]);
      if (missing.empty()) {
        on_ready();
        return;
      }
    }
    if (deadline.expired())
      throw TimeoutError(str_cat("FileStore ", path(), ": timed out waiting for key(s) [",
                                 join(missing, ", "), "] ", deadline.describe()));
    backoff.sleep(deadline);
  }
}

void FileStore::set(const std::string& key, std::span<const uint8_t> value) {
  Lock lock(log_, Deadline(timeout_));
  log_.refresh();
  log_.append({{raw_key(key), Bytes(value.begin(), value.end())}});
}

Bytes FileStore::get(const std::string& key) {
  Bytes value;
  poll_until_present({key}, Deadline(timeout_), [&] { value = log_.entries().at(raw_key(key)); });
  return value;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  Lock lock(log_, Deadline(timeout_));
  log_.refresh();
  return add_locked(raw_key(key), key, delta);
}

Bytes FileStore::compare_set(const std::string& key, std::span<const uint8_t> expected,
                             std::span<const uint8_t> desired) {
  Lock lock(log_, Deadline(timeout_));
  log_.refresh();
  const std::string raw = raw_key(key);
  auto it = log_.entries().find(raw);
  const bool present = it != log_.entries().end();
  if (!present && !expected.empty()) return Bytes(expected.begin(), expected.end());
  if (present && !std::ranges::equal(it->second, expected)) return it->second;
  Bytes value(desired.begin(), desired.end());
  log_.append({{raw, value}});
  return value;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  Lock lock(log_, Deadline(timeout_));
  log_.refresh();
  return std::ranges::all_of(
      keys, [&](const std::string& k) { return log_.entries().contains(raw_key(k)); });
}

void FileStore::wait(const std::vector<std::string>& keys, Timeout timeout) {
  poll_until_present(keys, Deadline(resolve_timeout(timeout, timeout_)), [] {});
}

bool FileStore::delete_key(const std::string& key) {
  Lock lock(log_, Deadline(timeout_));
  log_.refresh();
  const std::string raw = raw_key(key);
  if (!log_.entries().contains(raw)) return false;
  log_.append({{std::string(FileStoreLog::kTombstonePrefix) + raw, Bytes{}}});
  return true;
}

int64_t FileStore::num_keys() {
  Lock lock(log_, Deadline(timeout_));
  log_.refresh();
  return std::ranges::count_if(log_.entries(),
                               [](const auto& kv) { return kv.first.starts_with(kUserPrefix); });
}

void FileStore::append(const std::string& key, std::span<const uint8_t> value) {
  Lock lock(log_, Deadline(timeout_));
  log_.refresh();
  const std::string raw = raw_key(key);
  Bytes joined;
  if (auto it = log_.entries().find(raw); it != log_.entries().end()) joined = it->second;
  joined.insert(joined.end(), value.begin(), value.end());
  log_.append({{raw, std::move(joined)}});
}

std::vector<Bytes> FileStore::multi_get(const std::vector<std::string>& keys) {
  std::vector<Bytes> values;
  poll_until_present(keys, Deadline(timeout_), [&] {
    values.reserve(keys.size());
    for (const auto& k : keys) values.push_back(log_.entries().at(raw_key(k)));
  });
  return values;
}

void FileStore::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  COLLIE_ARG_CHECK_EQ(keys.size(), values.size(), "multi_set needs one value per key");
  std::vector<FileStoreLog::Record> records;
  records.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) records.emplace_back(raw_key(keys[i]), values[i]);
  Lock lock(log_, Deadline(timeout_));
  log_.refresh();
  log_.append(records);
}

}  // namespace collie
