// Transport's point-to-point operations (see transport.h, start_p2p, and
// p2p_inbox.h). A send is a kP2P frame queued on the peer's connection like
// any message; a receive is posted in the inbox, and the connections it may
// come from are read during every call until it is done. Neither touches
// the collectives' sequence numbers: only the two ranks of a message take
// part in it, and a batch posted before a collective is still moving
// during it and after it. The book-keeping (the inbox, the queued sends,
// which connections a receive reads, what runs) is P2PState's (p2p_state.h);
// this file drives the connections.
#include <algorithm>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/transport/transport.h"

namespace collie {

std::shared_ptr<Transport::P2PRequest> Transport::start_p2p(std::span<const P2POp> ops,
                                                            const Deadline& deadline) {
  check_usable("send/recv");
  auto r = std::make_shared<P2PRequest>();
  r->ops.assign(ops.begin(), ops.end());
  post_p2p(*r, r->ops, deadline);
  return r;
}

void Transport::post_p2p(P2PRequest& request, std::span<const P2POp> ops,
                         const Deadline& deadline) {
  // Everything is checked before anything is posted: a refused batch must
  // leave no receive behind pointing at its buffers.
  for (const P2POp& op : ops) {
    if (op.type == P2POpType::kIrecv && op.peer == kAnySource && op.tensor.nbytes() > kP2PPiece)
      throw InvalidArgument(str_cat("send/recv on rank ", world_rank(), ": a receive of ",
                                    op.tensor.nbytes(),
                                    " bytes from any source (over 4 GiB, which travels in pieces "
                                    "that must all come from one sender): name the sender"));
  }
  P2PRequest* r = &request;
  r->op_count = ops.size();
  deadline_ = &deadline;  // for the connects
  next_report_ = {};
  // Lazy connections: every peer of the batch is linked first (a receive
  // from any source links every peer, since any may send).
  for (const P2POp& op : ops) {
    if (op.peer != kAnySource) {
      link(op.peer);
      continue;
    }
    for (int p = 0; p < world_size(); ++p)
      if (p != world_rank()) link(p);
  }
  // Receives first, so that a message already buffered is taken before the
  // sends go out; the vector is sized once, so the inbox may keep pointers.
  // A message over one frame's 4 GiB travels as several frames of
  // kP2PPiece bytes (the last one shorter), on one tag: FIFO per (peer,
  // tag) keeps them in order, and the receive posts one piece per frame.
  auto pieces = [](size_t bytes) { return bytes == 0 ? 1 : (bytes + kP2PPiece - 1) / kP2PPiece; };
  size_t receives = 0;
  for (const P2POp& op : ops)
    if (op.type == P2POpType::kIrecv) receives += pieces(op.tensor.nbytes());
  r->recvs.reserve(receives);
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    if (op.type != P2POpType::kIrecv) continue;
    const size_t bytes = op.tensor.nbytes();
    for (size_t at = 0, n = pieces(bytes); n > 0; --n, at += kP2PPiece) {
      r->recvs.push_back(P2PInbox::Recv{op.peer, op.tag, static_cast<uint8_t*>(op.tensor.data) + at,
                                        std::min(kP2PPiece, bytes - at)});
      r->recv_op.push_back(i);
      if (!p2p_.inbox().post(&r->recvs.back())) {
        p2p_.enter(ops);
        fail(ErrorKind::kBackend, str_cat(context(), ": ", p2p_.inbox().error()));
      }
    }
  }
  for (const P2POp& op : ops) {
    if (op.type != P2POpType::kIsend) continue;
    Connection& c = link(op.peer);
    const size_t bytes = op.tensor.nbytes();
    const size_t element = element_size(op.tensor.dtype);
    // A large message to a peer that may read this process's memory goes
    // as a descriptor, and the receiver copies it once (wire.h,
    // kP2PSingleCopy); the send is done when it says so.
    P2PState::CopySlot* slot = nullptr;
    if (single_copy_bytes_ > 0 && bytes >= single_copy_bytes_ && bytes <= kP2PPiece &&
        c.peer_pid() > 0)
      slot = p2p_.copy_slot(op.peer, op.tensor.data, bytes);
    if (slot != nullptr) {
      WireHeader h = WireHeader::p2p(group_, p2p_.next_seq(op.peer), op.tag, op.tensor.dtype,
                                     bytes / element, sizeof(P2PCopyDescriptor));
      h.algorithm = kP2PSingleCopy;
      c.post_send(h, &slot->descriptor);
    } else {
      for (size_t at = 0, n = pieces(bytes); n > 0; --n, at += kP2PPiece) {
        const size_t piece = std::min(kP2PPiece, bytes - at);
        c.post_send(WireHeader::p2p(group_, p2p_.next_seq(op.peer), op.tag, op.tensor.dtype,
                                    piece / element, static_cast<uint32_t>(piece)),
                    static_cast<const uint8_t*>(op.tensor.data) + at);
      }
    }
    const uint64_t out = c.sends_completed() + c.sends_queued();
    p2p_.queued_until(op.peer, out);
    r->sends.push_back(P2PRequest::Send{op.peer, out, slot ? &slot->done : nullptr,
                                        slot ? slot->descriptor.done_value : 0, bytes});
  }
}

bool Transport::p2p_done(const P2PRequest& r) const {
  for (const auto& recv : r.recvs)
    if (!recv.done) return false;
  for (const auto& s : r.sends)
    if (conn(s.peer).sends_completed() < s.completed || !s.out()) return false;
  return true;
}

void Transport::p2p_sources(const P2PRequest& r, std::vector<int>* sources) {
  sources->assign(r.op_count, -1);
  for (size_t k = 0; k < r.recvs.size(); ++k) (*sources)[r.recv_op[k]] = r.recvs[k].source;
}

void Transport::wait_p2p(const P2PRequest& r, const Deadline& deadline,
                         std::span<const P2POp> ops) {
  check_usable("send/recv");
  deadline_ = &deadline;
  next_report_ = {};
  p2p_.begin_wait(r, ops.empty() ? std::span<const P2POp>(r.ops) : ops);
  struct Reset {
    P2PState& p2p;
    ~Reset() { p2p.end_wait(); }
  } reset{p2p_};
  while (!p2p_done(r)) progress();
}

void Transport::cancel_p2p() {
  p2p_.inbox().clear();
  p2p_.abandon_copies();
}

void Transport::poll_p2p(const Deadline& deadline) {
  if (failure_.broken()) return;
  if (failure_.aborted()) fail_aborted();
  deadline_ = &deadline;
  p2p_.enter({});
  progress_all();
  p2p_.leave();
}

void Transport::run_p2p(std::span<const P2POp> ops, const Deadline& deadline) {
  check_usable("send/recv");
  // A blocking call's ops outlive the run: the request keeps no copy. Its
  // vectors keep their capacity from run to run. One run at a time (the
  // transport's calls are), and after a failure the transport is broken, so
  // the inbox's pointers into the old receives are never used.
  P2PRequest& r = blocking_p2p_;
  r.recvs.clear();
  r.recv_op.clear();
  r.sends.clear();
  post_p2p(r, ops, deadline);
  wait_p2p(r, deadline, ops);
}

bool Transport::progress_p2p_reads(Connection& c, bool wanted_only) {
  RecvProblem problem = RecvProblem::kNone;
  int err = 0;
  bool other_next = false;
  const long r = c.progress_p2p(&problem, &err, &other_next, wanted_only);
  if (r < 0) on_recv_problem(c, problem, err);
  if (other_next && p2p_.inbox().wants(c.peer())) on_p2p_blocked(c);
  return r > 0;
}

void Transport::on_p2p_blocked(Connection& c) {
  WireHeader h;
  if (!c.peek_header(&h)) return;
  if (h.magic != kWireMagic || h.group != group_) fail_mismatch(c, h);
  switch (static_cast<FrameType>(h.frame)) {
    case FrameType::kAbort: fail_from_peer(c, c.take_abort_frame());
    case FrameType::kProbe:
      if (h.is_probe(group_)) fail_probed(c, h);
      fail_mismatch(c, h);
    case FrameType::kGoodbye:
      if (p2p_.waiting() != nullptr && p2p_.inbox().wants_exactly(c.peer()))
        fail(ErrorKind::kNetwork, str_cat(context(), ": ", c.name(),
                                          " closed its communicator while this rank still "
                                          "waited for its message"));
      break;
    case FrameType::kData:
      // The peer is already in a later collective, and its message (if it
      // sent one) is behind that collective's data: this rank cannot reach
      // it before it calls the collective, which it will not do before this
      // receive completes. The two ranks issued them in different orders.
      // Only while this rank waits for point-to-point ops: in a collective
      // the data may be this very call's, read by its own receives.
      if (p2p_.waiting() != nullptr && p2p_.inbox().wants_exactly(c.peer()))
        fail(ErrorKind::kBackend,
             str_cat(context(), ": ", c.name(), " sent data of ", h.call().describe_with_seq(),
                     " ahead of the message this rank waits for: the two ranks issued that "
                     "collective and this send/recv in different orders"));
      break;
    case FrameType::kP2P: return;  // read on the next pass
  }
  p2p_.block(c.peer(), call_.seq);
}

}  // namespace collie
