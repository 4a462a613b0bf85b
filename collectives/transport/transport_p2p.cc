// Transport's point-to-point operations (see transport.h, run_p2p, and
// p2p_inbox.h). A send is a kP2P frame queued on the peer's connection like
// any message; a receive is posted in the inbox, and the connections it may
// come from are read while it waits. Neither touches the collectives'
// sequence numbers: only the two ranks of a message take part in it.
#include <algorithm>

#include "base/error.h"
#include "base/str_cat.h"
#include "collectives/transport/transport.h"

namespace collie {

std::string Transport::describe_p2p() const {
  const std::span<const P2POp> ops = p2p_ops_;
  auto one = [](const P2POp& op) {
    const bool send = op.type == P2POpType::kIsend;
    return str_cat(send ? "send to " : "recv from ",
                   op.peer == kAnySource ? std::string("any rank") : str_cat("rank ", op.peer),
                   " (", op.tensor.dtype, " x ", op.tensor.count, ", tag ", op.tag, ")");
  };
  if (ops.size() == 1) return one(ops[0]);
  std::vector<std::string> parts;
  for (const auto& op : ops) parts.push_back(one(op));
  return str_cat("batch_isend_irecv [", join(parts, ", "), "]");
}

void Transport::run_p2p(std::span<const P2POp> ops, const Deadline& deadline,
                        std::vector<int>* sources) {
  check_usable("send/recv");
  deadline_ = &deadline;
  next_report_ = {};
  in_p2p_ = true;
  p2p_ops_ = ops;
  sources->assign(ops.size(), -1);
  // Receives first, so that a message already buffered is taken before the
  // sends go out; the vector is sized once, so the inbox may keep pointers.
  // Lazy connections: every peer of the batch is linked first (a receive
  // from any source links every peer, since any may send).
  for (const P2POp& op : ops) {
    if (op.peer != kAnySource) {
      link(op.peer);
      continue;
    }
    for (int p = 0; p < size_; ++p)
      if (p != rank_) link(p);
  }
  std::vector<P2PInbox::Recv> recvs;
  recvs.reserve(ops.size());
  std::vector<size_t> recv_op;
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    if (op.type != P2POpType::kIrecv) continue;
    recvs.push_back(P2PInbox::Recv{op.peer, op.tag, op.tensor.data, op.tensor.nbytes()});
    recv_op.push_back(i);
    if (!inbox_.post(&recvs.back()))
      fail(ErrorKind::kBackend, str_cat(context(), ": ", inbox_.error()));
  }
  struct SendTarget {
    Connection* c;
    uint64_t completed;  // the connection's sends_completed() once ours are out
  };
  std::vector<SendTarget> sends;
  for (const P2POp& op : ops) {
    if (op.type != P2POpType::kIsend) continue;
    const size_t bytes = op.tensor.nbytes();
    if (bytes > UINT32_MAX)
      throw InvalidArgument(
          str_cat(context(), ": a message of ", bytes, " bytes is larger than one frame (4 GiB)"));
    Connection& c = link(op.peer);
    c.post_send(WireHeader::p2p(group_, ++p2p_sent_[op.peer], op.tag, op.tensor.dtype,
                                op.tensor.count, static_cast<uint32_t>(bytes)),
                op.tensor.data);
    sends.push_back(SendTarget{&c, c.sends_completed() + c.sends_queued()});
  }
  auto done = [&] {
    for (const auto& r : recvs)
      if (!r.done) return false;
    for (const auto& s : sends)
      if (s.c->sends_completed() < s.completed) return false;
    return true;
  };
  while (!done()) progress();
  for (size_t k = 0; k < recvs.size(); ++k) (*sources)[recv_op[k]] = recvs[k].source;
  in_p2p_ = false;
  p2p_ops_ = {};
}

bool Transport::progress_p2p_reads(Connection& c) {
  RecvProblem problem = RecvProblem::kNone;
  int err = 0;
  bool other_next = false;
  const long r = c.progress_p2p(&problem, &err, &other_next);
  if (r < 0) on_recv_problem(c, problem, err);
  if (other_next && inbox_.wants(c.peer())) on_p2p_blocked(c);
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
      if (inbox_.wants_exactly(c.peer()))
        fail(ErrorKind::kNetwork, str_cat(context(), ": ", c.name(),
                                          " closed its communicator while this rank still "
                                          "waited for its message"));
      break;
    case FrameType::kData:
      // The peer is already in a later collective, and its message (if it
      // sent one) is behind that collective's data: this rank cannot reach
      // it before it calls the collective, which it will not do before this
      // receive completes. The two ranks issued them in different orders.
      if (inbox_.wants_exactly(c.peer()))
        fail(ErrorKind::kBackend,
             str_cat(context(), ": ", c.name(), " sent data of ", h.call().describe_with_seq(),
                     " ahead of the message this rank waits for: the two ranks issued that "
                     "collective and this send/recv in different orders"));
      break;
    case FrameType::kP2P: return;  // read on the next pass
  }
  p2p_blocked_[c.peer()] = call_.seq;
}

}  // namespace collie
