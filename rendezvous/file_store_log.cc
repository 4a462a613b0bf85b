#include "collie/rendezvous/file_store_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "collie/base/backoff.h"
#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"

namespace collie {
namespace {

// The lock is held for microseconds at a time, so a contender retries fast.
constexpr auto kFirstLockPause = std::chrono::microseconds(100);
constexpr auto kMaxLockPause = std::chrono::microseconds(2000);

std::string errno_text() { return std::strerror(errno); }

void put_u32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

FileStoreLog::FileStoreLog(std::string path, size_t max_field_bytes)
    : path_(std::move(path)),
      // A field's length is a uint32 on disk.
      max_field_bytes_(std::min<size_t>(max_field_bytes, std::numeric_limits<uint32_t>::max())) {
  fd_.reset(::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!fd_) throw StoreError(str_cat("FileStore: cannot open ", path_, ": ", errno_text()));
}

FileStoreLog::Lock::Lock(FileStoreLog& log, const Deadline& deadline) : log_(log), guard_(log.mu_) {
  Backoff backoff({.initial = kFirstLockPause, .max = kMaxLockPause});
  while (::flock(log_.fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK)
      throw StoreError(str_cat("FileStore ", log_.path_, ": flock failed: ", errno_text()));
    if (!backoff.sleep(deadline))
      throw TimeoutError(str_cat("FileStore ", log_.path_, ": another process held the file lock ",
                                 deadline.describe()));
  }
}

FileStoreLog::Lock::~Lock() { ::flock(log_.fd_.get(), LOCK_UN); }

void FileStoreLog::corrupt(uint64_t offset, const std::string& what) const {
  throw StoreError(str_cat("FileStore ", path_, ": corrupt record at offset ", offset, ": ", what));
}

void FileStoreLog::read_exact(uint64_t at, void* buf, size_t n, uint64_t record) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::pread(fd_.get(), p, n, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      corrupt(record, got < 0 ? "read failed: " + errno_text() : "unexpected end of file");
    p += got;
    at += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
}

// One field: a uint32 length, checked against the bytes left and the cap
// before anything is allocated, then the bytes.
Bytes FileStoreLog::read_field(uint64_t record, uint64_t& at, uint64_t size, const char* what) {
  if (size - at < 4)
    corrupt(record, str_cat("truncated ", what, " length at byte ", at, " of ", size));
  uint8_t raw[4];
  read_exact(at, raw, 4, record);
  const uint64_t len =
      uint64_t{raw[0]} | uint64_t{raw[1]} << 8 | uint64_t{raw[2]} << 16 | uint64_t{raw[3]} << 24;
  at += 4;
  if (len > max_field_bytes_)
    corrupt(record,
            str_cat(what, " length ", len, " exceeds the cap of ", max_field_bytes_, " bytes"));
  if (size - at < len)
    corrupt(record, str_cat(what, " of ", len, " bytes runs past the end of the file (", size - at,
                            " bytes left)"));
  Bytes bytes(len);
  if (len > 0) read_exact(at, bytes.data(), len, record);
  at += len;
  return bytes;
}

void FileStoreLog::apply(std::string key, Bytes value) {
  if (key.starts_with(kTombstonePrefix))
    entries_.erase(key.substr(kTombstonePrefix.size()));
  else
    entries_[std::move(key)] = std::move(value);
}

void FileStoreLog::refresh() {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0)
    throw StoreError(str_cat("FileStore ", path_, ": fstat failed: ", errno_text()));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < offset_)
    throw StoreError(str_cat("FileStore ", path_, ": the file shrank from ", offset_, " to ", size,
                             " bytes; someone truncated or replaced it"));
  while (offset_ < size) {
    uint64_t at = offset_;
    Bytes key = read_field(offset_, at, size, "key");
    Bytes value = read_field(offset_, at, size, "value");
    apply(std::string(key.begin(), key.end()), std::move(value));
    offset_ = at;
  }
}

void FileStoreLog::append(const std::vector<Record>& records) {
  Bytes buf;
  for (const auto& [key, value] : records) {
    if (key.size() > max_field_bytes_ || value.size() > max_field_bytes_)
      throw InvalidArgument(str_cat("FileStore ", path_, ": key '", key.substr(0, 64), "' (",
                                    key.size(), " bytes) with a value of ", value.size(),
                                    " bytes is over the cap of ", max_field_bytes_, " bytes"));
    put_u32(buf, static_cast<uint32_t>(key.size()));
    buf.insert(buf.end(), key.begin(), key.end());
    put_u32(buf, static_cast<uint32_t>(value.size()));
    buf.insert(buf.end(), value.begin(), value.end());
  }
  // The file is opened O_APPEND and refresh() read it to its end under the
  // lock, so this write starts exactly at offset_.
  size_t done = 0;
  while (done < buf.size()) {
    ssize_t n = ::write(fd_.get(), buf.data() + done, buf.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = n < 0 ? errno_text() : "wrote nothing";
      // Cut the partial record off again, so the log stays readable.
      if (::ftruncate(fd_.get(), static_cast<off_t>(offset_)) != 0) {
        COLLIE_LOG(kError) << "FileStore " << path_ << ": could not cut a partial record at "
                           << offset_ << ": " << errno_text();
      }
      throw StoreError(
          str_cat("FileStore ", path_, ": write of ", buf.size(), " bytes failed: ", why));
    }
    done += static_cast<size_t>(n);
  }
  offset_ += buf.size();
  for (const auto& [key, value] : records) apply(key, value);
}

bool FileStoreLog::grew() {
  std::lock_guard guard(mu_);
  struct stat st {};
  return ::fstat(fd_.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) != offset_;
}

void FileStoreLog::remove_file() {
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) {
    COLLIE_LOG(kWarn) << "FileStore " << path_ << ": could not remove it: " << errno_text();
  }
}

}  // namespace collie
