#include "rendezvous/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <thread>

#include "rendezvous/store_util.h"
#include "runtime/base/check.h"
#include "runtime/base/error.h"
#include "runtime/base/logging.h"
#include "runtime/base/str_cat.h"

namespace collie {
namespace {

// torch's FileStore key spaces: user keys live under "/", a tombstone is the
// user's raw key under "-", and the two lifetime counters sit outside both.
constexpr std::string_view kUserPrefix = "/";
constexpr std::string_view kDeletePrefix = "-";
const std::string kRefCountKey = "refcount/";
const std::string kCleanupKey = "cleanup/";

// get/wait re-read the file after 1 ms, then back off to at most 50 ms, so a
// waiter notices a set quickly without spinning on the lock.
constexpr auto kFirstPoll = std::chrono::milliseconds(1);
constexpr auto kMaxPoll = std::chrono::milliseconds(50);
// The lock is held for microseconds at a time, so a contender retries fast.
constexpr auto kMaxLockPause = std::chrono::milliseconds(2);
// The destructor must not hang a process exit on a wedged peer.
constexpr Timeout kCloseLockLimit = std::chrono::seconds(60);

std::string raw_key(const std::string& key) { return std::string(kUserPrefix) + key; }

std::vector<std::string> raw_keys(const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(raw_key(k));
  return out;
}

void put_u32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

// Holds mu_ (threads of this process share one open file description, on
// which flock would not exclude them) and then the flock, taken with
// LOCK_NB and a back-off so that even the lock has a deadline.
class FileStore::Lock {
 public:
  Lock(FileStore& store, const Deadline& deadline) : store_(store), guard_(store.mu_) {
    auto pause = std::chrono::microseconds(100);
    while (::flock(store_.fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EINTR) continue;
      if (errno != EWOULDBLOCK)
        throw StoreError(str_cat("FileStore ", store_.path_, ": flock failed: ", errno_text()));
      if (deadline.expired())
        throw TimeoutError(str_cat("FileStore ", store_.path_,
                                   ": another process held the file lock ", deadline.describe()));
      std::this_thread::sleep_for(std::min<std::chrono::microseconds>(pause, deadline.remaining()));
      pause = std::min<std::chrono::microseconds>(pause * 2, kMaxLockPause);
    }
  }
  ~Lock() { ::flock(store_.fd_, LOCK_UN); }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

 private:
  FileStore& store_;
  std::lock_guard<std::mutex> guard_;
};

FileStore::FileStore(std::string path, int world_size, const FileStoreOptions& options)
    : Store(options.timeout),
      path_(std::move(path)),
      world_size_(world_size),
      max_value_bytes_(std::min<size_t>(options.max_value_bytes,
                                        std::numeric_limits<uint32_t>::max())) {
  COLLIE_ARG_CHECK(!path_.empty(), "FileStore needs a path");
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw StoreError(str_cat("FileStore: cannot open ", path_, ": ", errno_text()));
  try {
    Lock lock(*this, Deadline(timeout_));
    refresh_locked();
    add_locked(kRefCountKey, kRefCountKey, 1);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

FileStore::~FileStore() {
  try {
    Lock lock(*this, Deadline(std::min(timeout_, kCloseLockLimit)));
    refresh_locked();
    int64_t finished = add_locked(kCleanupKey, kCleanupKey, 1);
    int64_t references = add_locked(kRefCountKey, kRefCountKey, -1);
    // Remove under the lock, so that no one appends between the decision and
    // the unlink.
    if (references <= 0 && world_size_ > 0 && finished >= world_size_ &&
        ::unlink(path_.c_str()) != 0 && errno != ENOENT) {
      COLLIE_LOG(kWarn) << "FileStore " << path_ << ": could not remove it: " << errno_text();
    }
  } catch (const std::exception& e) {
    COLLIE_LOG(kWarn) << "FileStore " << path_ << ": leaving without cleaning up: " << e.what();
  }
  ::close(fd_);
}

void FileStore::corrupt(uint64_t offset, const std::string& what) const {
  throw StoreError(str_cat("FileStore ", path_, ": corrupt record at offset ", offset, ": ", what));
}

void FileStore::refresh_locked() {
  struct stat st {};
  if (::fstat(fd_, &st) != 0)
    throw StoreError(str_cat("FileStore ", path_, ": fstat failed: ", errno_text()));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < offset_)
    throw StoreError(str_cat("FileStore ", path_, ": the file shrank from ", offset_, " to ", size,
                             " bytes; someone truncated or replaced it"));

  auto read_exact = [&](uint64_t at, void* buf, size_t n) {
    auto* p = static_cast<char*>(buf);
    while (n > 0) {
      ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(at));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) corrupt(at, got < 0 ? "read failed: " + errno_text() : "unexpected end of file");
      p += got;
      at += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
    }
  };
  // One field: a uint32 length, validated against the file size and the cap
  // before anything is allocated, then the bytes.
  auto read_field = [&](uint64_t record, uint64_t& at, const char* what) {
    if (size - at < 4)
      corrupt(record, str_cat("truncated ", what, " length at byte ", at, " of ", size));
    uint8_t raw[4];
    read_exact(at, raw, 4);
    const uint64_t len = uint64_t{raw[0]} | uint64_t{raw[1]} << 8 | uint64_t{raw[2]} << 16 |
                         uint64_t{raw[3]} << 24;
    at += 4;
    if (len > max_value_bytes_)
      corrupt(record, str_cat(what, " length ", len, " exceeds the cap of ", max_value_bytes_,
                              " bytes"));
    if (size - at < len)
      corrupt(record, str_cat(what, " of ", len, " bytes runs past the end of the file (",
                              size - at, " bytes left)"));
    Bytes bytes(len);
    if (len > 0) read_exact(at, bytes.data(), len);
    at += len;
    return bytes;
  };

  while (offset_ < size) {
    uint64_t at = offset_;
    Bytes key_bytes = read_field(offset_, at, "key");
    Bytes value = read_field(offset_, at, "value");
    std::string key(key_bytes.begin(), key_bytes.end());
    if (key.starts_with(kDeletePrefix))
      cache_.erase(key.substr(kDeletePrefix.size()));
    else
      cache_[std::move(key)] = std::move(value);
    offset_ = at;
  }
}

void FileStore::check_size(const std::string& what, size_t size) const {
  if (size > max_value_bytes_)
    throw InvalidArgument(str_cat("FileStore ", path_, ": ", what, " has ", size,
                                  " bytes, over the cap of ", max_value_bytes_));
}

void FileStore::append_records_locked(
    const std::vector<std::pair<std::string, Bytes>>& records) {
  Bytes buf;
  for (const auto& [key, value] : records) {
    check_size(str_cat("key '", key, "'"), key.size());
    check_size(str_cat("the value of key '", key, "'"), value.size());
    put_u32(buf, static_cast<uint32_t>(key.size()));
    buf.insert(buf.end(), key.begin(), key.end());
    put_u32(buf, static_cast<uint32_t>(value.size()));
    buf.insert(buf.end(), value.begin(), value.end());
  }
  // The file is opened O_APPEND and we refreshed to its end under the lock,
  // so this write starts exactly at offset_.
  size_t done = 0;
  while (done < buf.size()) {
    ssize_t n = ::write(fd_, buf.data() + done, buf.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = n < 0 ? errno_text() : "wrote nothing";
      // Cut off the partial record so the log stays readable for everyone.
      if (::ftruncate(fd_, static_cast<off_t>(offset_)) != 0) {
        COLLIE_LOG(kError) << "FileStore " << path_ << ": could not cut a partial record at "
                           << offset_ << ": " << errno_text();
      }
      throw StoreError(str_cat("FileStore ", path_, ": write of ", buf.size(),
                               " bytes failed: ", why));
    }
    done += static_cast<size_t>(n);
  }
  offset_ += buf.size();
  for (const auto& [key, value] : records) {
    if (key.starts_with(kDeletePrefix))
      cache_.erase(key.substr(kDeletePrefix.size()));
    else
      cache_[key] = value;
  }
}

int64_t FileStore::add_locked(const std::string& raw, const std::string& shown, int64_t delta) {
  auto it = cache_.find(raw);
  int64_t value = (it == cache_.end() ? 0 : parse_counter(shown, it->second)) + delta;
  append_records_locked({{raw, to_bytes(std::to_string(value))}});
  return value;
}

bool FileStore::file_grew() {
  std::lock_guard guard(mu_);
  struct stat st {};
  return ::fstat(fd_, &st) != 0 || static_cast<uint64_t>(st.st_size) != offset_;
}

void FileStore::poll_until_present(const std::vector<std::string>& keys,
                                   const Deadline& deadline,
                                   const std::function<void()>& on_ready) {
  const std::vector<std::string> raw = raw_keys(keys);
  auto pause = std::chrono::duration_cast<std::chrono::microseconds>(kFirstPoll);
  for (bool first = true;; first = false) {
    // Nothing can have appeared unless the file grew, and checking that
    // needs no flock: only take the lock when there is something to read.
    if (first || file_grew()) {
      Lock lock(*this, deadline);
      refresh_locked();
      if (std::ranges::all_of(raw, [&](const std::string& k) { return cache_.contains(k); })) {
        on_ready();
        return;
      }
    }
    if (deadline.expired()) {
      std::vector<std::string> missing;
      {
        std::lock_guard guard(mu_);
        for (size_t i = 0; i < keys.size(); ++i)
          if (!cache_.contains(raw[i])) missing.push_back(keys[i]);
      }
      throw TimeoutError(str_cat("FileStore ", path_, ": timed out waiting for key(s) [",
                                 join(missing, ", "), "] ", deadline.describe()));
    }
    std::this_thread::sleep_for(std::min<std::chrono::microseconds>(pause, deadline.remaining()));
    pause = std::min<std::chrono::microseconds>(pause * 2, kMaxPoll);
  }
}

void FileStore::set(const std::string& key, std::span<const uint8_t> value) {
  Lock lock(*this, Deadline(timeout_));
  refresh_locked();
  append_records_locked({{raw_key(key), Bytes(value.begin(), value.end())}});
}

Bytes FileStore::get(const std::string& key) {
  Bytes value;
  poll_until_present({key}, Deadline(timeout_), [&] { value = cache_.at(raw_key(key)); });
  return value;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  Lock lock(*this, Deadline(timeout_));
  refresh_locked();
  return add_locked(raw_key(key), key, delta);
}

Bytes FileStore::compare_set(const std::string& key, std::span<const uint8_t> expected,
                             std::span<const uint8_t> desired) {
  Lock lock(*this, Deadline(timeout_));
  refresh_locked();
  const std::string raw = raw_key(key);
  auto it = cache_.find(raw);
  if (it == cache_.end() && !expected.empty()) return Bytes(expected.begin(), expected.end());
  if (it != cache_.end() && !std::ranges::equal(it->second, expected)) return it->second;
  Bytes value(desired.begin(), desired.end());
  append_records_locked({{raw, value}});
  return value;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  Lock lock(*this, Deadline(timeout_));
  refresh_locked();
  return std::ranges::all_of(keys, [&](const std::string& k) { return cache_.contains(raw_key(k)); });
}

void FileStore::wait(const std::vector<std::string>& keys, Timeout timeout) {
  poll_until_present(keys, Deadline(resolve_timeout(timeout, timeout_)), [] {});
}

bool FileStore::delete_key(const std::string& key) {
  Lock lock(*this, Deadline(timeout_));
  refresh_locked();
  const std::string raw = raw_key(key);
  if (!cache_.contains(raw)) return false;
  append_records_locked({{std::string(kDeletePrefix) + raw, Bytes{}}});
  return true;
}

int64_t FileStore::num_keys() {
  Lock lock(*this, Deadline(timeout_));
  refresh_locked();
  return std::ranges::count_if(cache_, [](const auto& kv) { return kv.first.starts_with(kUserPrefix); });
}

void FileStore::append(const std::string& key, std::span<const uint8_t> value) {
  Lock lock(*this, Deadline(timeout_));
  refresh_locked();
  const std::string raw = raw_key(key);
  Bytes joined;
  if (auto it = cache_.find(raw); it != cache_.end()) joined = it->second;
  joined.insert(joined.end(), value.begin(), value.end());
  append_records_locked({{raw, std::move(joined)}});
}

std::vector<Bytes> FileStore::multi_get(const std::vector<std::string>& keys) {
  std::vector<Bytes> values;
  poll_until_present(keys, Deadline(timeout_), [&] {
    values.reserve(keys.size());
    for (const auto& k : keys) values.push_back(cache_.at(raw_key(k)));
  });
  return values;
}

void FileStore::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  COLLIE_ARG_CHECK_EQ(keys.size(), values.size(), "multi_set needs one value per key");
  std::vector<std::pair<std::string, Bytes>> records;
  records.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) records.emplace_back(raw_key(keys[i]), values[i]);
  Lock lock(*this, Deadline(timeout_));
  refresh_locked();
  append_records_locked(records);
}

}  // namespace collie
