#include "collie/rendezvous/tcp_store/tcp_store_connection.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"

namespace collie {
namespace {

// Reads start small (most requests are tens of bytes, and a server may hold
// thousands of idle connections) and grow towards the size a partly received
// request has declared, up to this step.
constexpr size_t kMinReadBytes = 4096;
constexpr size_t kMaxReadBytes = size_t{1} << 20;

}  // namespace

using store_protocol::Op;
using store_protocol::ParseResult;

StoreConnection::StoreConnection(ConnectionId id, asio::ip::tcp::socket socket,
                                 StoreConnectionOwner& owner)
    : id_(id), socket_(std::move(socket)), owner_(owner) {
  std::error_code ec;
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  socket_.non_blocking(true, ec);  // for flush()'s direct write
  auto peer = socket_.remote_endpoint(ec);
  peer_ = ec ? std::string("?") : str_cat(peer.address().to_string(), ":", peer.port());
  if (const StoreAuthPolicy* policy = owner_.auth_policy(); policy && policy->secret)
    auth_ = std::make_unique<StoreAuthGate>(*policy);
  ledger_ = owner_.reply_ledger();
  out_.track(ledger_);
}

void StoreConnection::account() {
  if (!ledger_) return;
  const size_t now = out_.owned_size();
  if (now > accounted_) ledger_->add_owned(now - accounted_);
  if (now < accounted_) ledger_->remove_owned(accounted_ - now);
  accounted_ = now;
}

void StoreConnection::start() { read(); }

void StoreConnection::read() {
  if (closed_ || closing_ || read_in_flight_) return;
  const size_t buffered = end_ - begin_;
  const size_t cap = owner_.limits().request_cap();
  // Back-pressure: a client that does not read its replies, or that piles
  // requests behind a parked GET, stops being read until that drains.
  if (output_full() || (blocked_ && buffered > cap)) return;

  if (buffered == 0) {
    begin_ = end_ = 0;
    if (in_.size() > kMaxReadBytes) Bytes().swap(in_);  // a big value has gone
  } else if (begin_ > 0) {
    std::memmove(in_.data(), in_.data() + begin_, buffered);
    begin_ = 0;
    end_ = buffered;
  }
  // Grow towards a declared length no faster than data actually arrives
  // (at most doubling what is buffered), so that a thousand clients that
  // each announce a large value and stall cost kilobytes, not their claims.
  const size_t missing = need_ > buffered ? need_ - buffered : 0;
  const size_t want = std::clamp(std::min(missing, std::max(buffered, kMinReadBytes)),
                                 kMinReadBytes, kMaxReadBytes);
  if (in_.size() < end_ + want) in_.resize(end_ + want);

  read_in_flight_ = true;
  socket_.async_read_some(
      asio::buffer(in_.data() + end_, in_.size() - end_),
      [self = shared_from_this()](std::error_code ec, size_t n) { self->on_read(ec, n); });
}

void StoreConnection::on_read(std::error_code ec, size_t n) {
  read_in_flight_ = false;
  if (closed_) return;
  if (ec) {
    if (auth_ && auth_->started()) {
      // A client that rejected our proof (another job's secret) hangs up here.
      COLLIE_LOG(kWarn) << "TcpStoreServer " << owner_.address() << ": client " << peer_
                        << " hung up during authentication (it holds a different job secret?)";
    } else if (end_ > begin_) {
      COLLIE_LOG(kInfo) << "TcpStoreServer " << owner_.address() << ": client " << peer_
                        << " went away mid-message (" << (end_ - begin_)
                        << " bytes unparsed): " << ec.message();
    } else {
      COLLIE_LOG(kDebug) << "TcpStoreServer " << owner_.address() << ": client " << peer_
                         << " closed: " << ec.message();
    }
    close();
    return;
  }
  end_ += n;
  pump();
  owner_.activity();
}

void StoreConnection::pump() {
  process();
  flush();
  account();
  read();
}

void StoreConnection::process() {
  while (!closed_ && !closing_ && !blocked_ && !output_full()) {
    const size_t buffered = end_ - begin_;
    if (buffered == 0 || buffered < need_) return;
    if (auth_) {
      // The job secret's exchange comes before any TCPStore request.
      StoreAuthGate::Step step = auth_->feed({in_.data() + begin_, buffered});
      begin_ += step.consumed;
      if (step.status == StoreAuthGate::Step::Status::kDone && !owner_.admit(id_)) {
        refuse(kStoreRefusedFull, "the server serves max_connections clients already");
        return;
      }
      out_.append(step.reply);
      if (step.status == StoreAuthGate::Step::Status::kRefuse) {
        drop(str_cat("refused: ", step.error));
        return;
      }
      if (step.status == StoreAuthGate::Step::Status::kNeedMore) {
        need_ = step.need;
        return;
      }
      need_ = 0;
      if (step.status == StoreAuthGate::Step::Status::kDone) auth_.reset();
      continue;
    }
    if (dialect_ == store_protocol::Dialect::kUnknown && in_[begin_] == kStoreAuthQuery) {
      refuse(kStoreRefusedNoSecret,
             "a client with COLLIE_JOB_SECRET, and this store runs without a job secret");
      return;
    }
    ParseResult r =
        store_protocol::parse_request({in_.data() + begin_, buffered}, dialect_, owner_.limits());
    switch (r.status) {
      case ParseResult::Status::kNeedMore: need_ = r.need_bytes; return;
      case ParseResult::Status::kError: drop(r.error); return;
      case ParseResult::Status::kRequest:
        begin_ += r.consumed;
        need_ = 0;
        apply(std::move(r.request));
        break;
    }
  }
}

void StoreConnection::apply(store_protocol::Request&& request) {
  if (request.op == Op::kProbe) {
    // kDetect's probe (store_protocol.h): say "both dialects" and keep
    // waiting for the connection's real first message.
    out_.fields().push_back(store_protocol::kProbeBothDialects);
    return;
  }
  if (dialect_ == store_protocol::Dialect::kUnknown &&
      request.dialect != store_protocol::Dialect::kUnknown) {
    dialect_ = request.dialect;
    COLLIE_LOG(kDebug) << "TcpStoreServer " << owner_.address() << ": client " << peer_
                       << " speaks the " << store_protocol::dialect_name(dialect_) << " dialect";
  }
  COLLIE_LOG(kTrace) << "TcpStoreServer " << owner_.address() << ": " << peer_ << " "
                     << store_protocol::op_name(request.op) << " (" << request.keys.size()
                     << " key(s))";
  if (request.op == Op::kValidate) return;
  if (request.op == Op::kWatchKey) {
    drop("WATCH_KEY (torch 1.13's watch_key callbacks) is not supported");
    return;
  }
  try {
    if (owner_.state().handle(id_, std::move(request), out_) == TcpStoreState::Outcome::kBlocked)
      blocked_ = true;
  } catch (const Error& e) {
    drop(e.what());
  }
}

void StoreConnection::send(ReplyQueue reply) {
  if (closed_) return;
  out_.splice(std::move(reply));
  flush();
  account();
}

void StoreConnection::resume() {
  if (closed_ || closing_) return;
  blocked_ = false;
  pump();
  owner_.activity();
}

void StoreConnection::flush() {
  if (closed_ || write_in_flight_) return;
  // The socket is non-blocking: write straight from the queue (a gather
  // write over its chunks) until the kernel's buffer is full.
  constexpr size_t kChunksPerWrite = 16;
  while (!out_.empty()) {
    std::array<std::span<const uint8_t>, kChunksPerWrite> spans;
    std::array<asio::const_buffer, kChunksPerWrite> buffers;
    const size_t n = out_.front(spans);
    for (size_t i = 0; i < n; ++i) buffers[i] = asio::buffer(spans[i].data(), spans[i].size());
    std::error_code ec;
    const size_t written =
        socket_.write_some(std::span<const asio::const_buffer>(buffers.data(), n), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      write_in_flight_ = true;
      socket_.async_wait(asio::ip::tcp::socket::wait_write,
                         [self = shared_from_this()](std::error_code ec) {
                           self->write_in_flight_ = false;
                           if (self->closed_) return;
                           if (ec) {
                             COLLIE_LOG(kDebug) << "TcpStoreServer " << self->owner_.address()
                                                << ": waiting to write to " << self->peer_
                                                << " failed: " << ec.message();
                             self->close();
                             return;
                           }
                           self->pump();
                           self->owner_.activity();
                         });
      return;
    }
    if (ec) {
      COLLIE_LOG(kDebug) << "TcpStoreServer " << owner_.address() << ": write to " << peer_
                         << " failed: " << ec.message();
      close();
      return;
    }
    out_.consume(written);
  }
  if (closing_) close();
}

void StoreConnection::refuse(uint8_t notice, const std::string& why, LogLevel level) {
  if (closed_ || closing_) return;
  out_.fields().push_back(notice);
  drop(why, level);
}

void StoreConnection::drop(const std::string& why, LogLevel level) {
  if (level >= log_level()) {
    detail::LogLine(level, __FILE__, __LINE__)
        << "TcpStoreServer " << owner_.address() << ": dropping connection from " << peer_ << ": "
        << why;
  }
  // Replies to the requests before the bad one still go out (torch's server
  // answers each request as it reads it); then the connection closes.
  closing_ = true;
  flush();  // closes once the queue is empty
}

void StoreConnection::abandon(const std::string& why) {
  if (closed_) return;
  // Not drop(): what is queued would never be read.
  COLLIE_LOG(kWarn) << "TcpStoreServer " << owner_.address() << ": dropping connection from "
                    << peer_ << ": " << why;
  close();
}

void StoreConnection::close() {
  if (closed_) return;
  closed_ = true;
  // What was not sent never will be: let go of it now, not when the last
  // handler holding this connection runs.
  out_.clear();
  account();
  std::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  owner_.closed(id_);
}

}  // namespace collie
