// The hierarchical algorithms, for a group that spans hosts: the ranks of
// one host work together over shared memory and only a few messages per
// host cross the network (TCP). docs/algorithms.md ("Hierarchical
// collectives across hosts") has the steps and the bytes on the wire.
//
// Every step runs an existing algorithm on a sub-group of the call
// (Transport::SubgroupScope): the ranks of one host, the ranks with the same
// local index on every host, or one leader per host. Each step's messages
// carry the call's header, so a mismatched call is still found before data
// lands, and a failure anywhere still breaks every rank (the abort frame and
// the EOF travel over every connection, whichever step a rank is in).
//
// Numbering: hosts in the order of their lowest rank, the ranks of a host in
// rank order, so every sub-group is the same on every rank.
//
// all_reduce (H hosts of L ranks each, B bytes):
//  - large (B > small_message_bytes): shm_all_reduce on each host, with the
//    inter-host step in its middle: local rank l reduces slice l (B/L) of
//    its host's inputs by reading its host peers' memory; the ranks with
//    local index l (one per host) all_reduce that slice over TCP
//    (across_hosts: the direct exchange, the two-step exchange or the ring,
//    by size); then every rank reads the other final slices from their
//    owners. Each element is reduced by one rank per host in host rank
//    order, then across hosts by the inter-host algorithm, which leaves each
//    slice bitwise the same on every rank of its sub-group; the gather
//    copies it: every rank gets the same bits.
//  - small: the direct exchange on each host (every host rank then holds
//    the host's sum, bitwise the same), then the hosts' leaders (local rank
//    0) all_reduce that sum (across_hosts: one hop up to
//    hierarchical_small_bytes, two with 2 (H-1)/H B per host link above),
//    and each leader sends the result to its host peers. One rank per host
//    on the network: (H-1) TCP messages per host and hop, not L (H-1).
//  AVG runs as SUM and divides by the world size once, at the end;
//  float16/bfloat16 are rounded once per level (host, then hosts), not once
//  overall as in the flat ring: once would carry float32 between the levels,
//  twice a half tensor's bytes across hosts (docs/algorithms.md).
//
// broadcast: the root's tensor goes to one leader per host (the root on its
// own host, the host's lowest rank elsewhere) with the flat broadcast over
// TCP, then each leader broadcasts on its host (shm_broadcast for large
// tensors, the direct sends for small ones).
//
// all_gather (tensor form, c bytes per rank): (1) the ranks of local index
// l, one per host, all_gather their inputs over TCP straight into the
// output's slots of those ranks; (2) on each host, every rank copies from
// each host peer p the H slots that p gathered (CMA reads). Each rank sends
// and receives (H-1) c across hosts: each host (H-1) L c, the least it can
// receive. Up to small_message_bytes of output, one rank per host on the
// network instead: the host's inputs go to its leader, the leaders
// all_gather the host blocks (L c each) over TCP, and each leader sends the
// whole result to its host peers: (H-1) TCP messages per host, not L (H-1),
// and no peer memory read for a few bytes.
//
// reduce_scatter (tensor form, c elements out per rank): (1) on each host,
// local rank l reduces the H chunks of the host's inputs that belong to
// the ranks of local index l (one per host), in host rank order, into a
// staging buffer of H c elements; (2) those ranks reduce_scatter the
// staging buffers over TCP, chunk h going to host h's rank. (H-1) c
// elements cross per rank. Up to small_message_bytes of input: the host's
// inputs are reduced at its leader (the flat reduce), the leaders
// reduce_scatter the sums over TCP in blocks of L c (host h's ranks'
// chunks), and each leader sends its host peers their chunk.
//
// reduce (n elements to root): (1) local rank l reduces slice l (n/L) of
// the host's inputs; (2) the ranks of local index l reduce their slice over
// TCP to the one on the root's host; (3) the root copies the L final slices
// from its host peers. Each host sends its partial sum across once, cut in
// L slices that travel in parallel.
//
// barrier: every rank checks in with its host's lowest rank (the leader),
// the leaders run the dissemination barrier over TCP, then each leader
// releases its host. Hosts may run different numbers of ranks.
#include "collie/collectives/algorithms.h"

#include <algorithm>
#include <cstring>

#include "collie/base/check.h"
#include "collie/collectives/reduce_kernels.h"

namespace collie {
namespace {

// AVG's final step for any floating type (halves through float32).
void divide_by(Workspace& ws, void* data, size_t n, DataType dtype, int divisor) {
  if (n == 0) return;
  if (!is_half(dtype)) {
    divide(data, n, dtype, divisor);
    return;
  }
  auto* acc = static_cast<float*>(ws.get(4, n * sizeof(float)));
  widen(acc, data, n, dtype);
  narrow(data, acc, n, dtype, static_cast<float>(divisor));
}

// The ranks of local index l, one per host, in host order.
std::vector<int> column(const HostMap& map, int l) {
  std::vector<int> out;
  for (const auto& host : map.hosts) out.push_back(host[l]);
  return out;
}

// The all_reduce of `buffer` (in place) between the ranks of local index
// l, one per host: the direct exchange (one hop) up to
// hierarchical_small_bytes, the two-step exchange (2 (H-1)/H of the buffer
// per rank) up to small_message_bytes, the ring above, or beyond
// kDirectPeers hosts.
void across_hosts(Transport& t, Workspace& ws, const AlgorithmConfig& cfg, const HostMap& map,
                  int l, TensorView buffer, ReduceOp op) {
  Transport::SubgroupScope scope(t, column(map, l));
  if (buffer.nbytes() > cfg.small_message_bytes || t.size() > kDirectPeers) {
    ring_all_reduce(t, ws, cfg, buffer, buffer, op);
  } else if (buffer.nbytes() <= cfg.hierarchical_small_bytes) {
    small_all_reduce(t, ws, buffer, buffer, op);
  } else {
    two_step_all_reduce(t, ws, buffer, buffer, op);
  }
}

}  // namespace

HostMap::HostMap(std::vector<int> hosts_of) : host_of(std::move(hosts_of)) {
  local_index.resize(host_of.size());
  for (size_t r = 0; r < host_of.size(); ++r) {
    const auto h = static_cast<size_t>(host_of[r]);
    if (hosts.size() <= h) hosts.resize(h + 1);
    local_index[r] = static_cast<int>(hosts[h].size());
    hosts[h].push_back(static_cast<int>(r));
  }
  for (const auto& host : hosts) {
    uniform = uniform && host.size() == hosts[0].size();
    max_local = std::max(max_local, static_cast<int>(host.size()));
  }
}

void hierarchical_all_reduce(Transport& t, Workspace& ws, const AlgorithmConfig& cfg,
                             const HostMap& map, TensorView in, TensorView out, ReduceOp op) {
  COLLIE_CHECK(map.uniform, "hierarchical all_reduce over hosts of different sizes");
  const int me = t.rank(), world = t.size();  // before the scopes renumber them
  const ReduceOp level_op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  const size_t es = element_size(out.dtype);
  const int l = map.local_index[me];
  Transport::SubgroupScope host(t, map.hosts[map.host_of[me]]);
  if (out.nbytes() <= cfg.small_message_bytes) {
    if (t.size() > 1) {
      small_all_reduce(t, ws, in, out, level_op);
    } else if (in.data != out.data && out.count > 0) {
      std::memcpy(out.data, in.data, out.nbytes());
    }
    if (l == 0) across_hosts(t, ws, cfg, map, 0, out, level_op);
    if (t.size() > 1) broadcast(t, cfg, out, 0);
    if (op == ReduceOp::kAvg) divide_by(ws, out.data, out.count, out.dtype, world);
    return;
  }
  shm_all_reduce(t, ws, in, out, level_op, [&](size_t lo, size_t hi) {
    // Every rank of a sub-group has the same slice bounds, so a sub-group
    // with an empty slice skips the step together.
    if (hi == lo) return;
    TensorView slice{static_cast<uint8_t*>(out.data) + lo * es, hi - lo, out.dtype, out.device};
    across_hosts(t, ws, cfg, map, l, slice, level_op);
    if (op == ReduceOp::kAvg) divide_by(ws, slice.data, slice.count, slice.dtype, world);
  });
}

void hierarchical_broadcast(Transport& t, const AlgorithmConfig& cfg, const HostMap& map,
                            TensorView tensor, int root) {
  const int me = t.rank();
  const int root_host = map.host_of[root];
  auto leader_of = [&](int h) { return h == root_host ? root : map.hosts[h][0]; };
  const auto& host = map.hosts[map.host_of[me]];
  const int leader = leader_of(map.host_of[me]);
  if (me == leader) {
    std::vector<int> leaders;
    for (int h = 0; h < static_cast<int>(map.hosts.size()); ++h) leaders.push_back(leader_of(h));
    Transport::SubgroupScope scope(t, leaders);
    broadcast(t, cfg, tensor, root_host);
  }
  if (host.size() < 2) return;
  Transport::SubgroupScope scope(t, host);
  const int local_root = map.local_index[leader];
  if (tensor.nbytes() > cfg.small_message_bytes) {
    shm_broadcast(t, tensor, local_root);
  } else {
    broadcast(t, cfg, tensor, local_root);
  }
}

// The small all_gather and reduce_scatter: one rank per host (its leader,
// local index 0) on the network. Staging is host-major: host h's ranks in
// local order, c bytes each.
namespace {

// The block of `host` (its ranks' c bytes each, local order) lands in its
// leader's `block`: the others send theirs (shared memory).
void gather_to_leader(Transport& t, const std::vector<int>& host, const void* mine, void* block,
                      size_t c) {
  Transport::SubgroupScope scope(t, host);
  if (t.rank() != 0) {
    t.send(0, mine, c);
    t.wait_all();
    return;
  }
  auto* b = static_cast<uint8_t*>(block);
  if (c > 0 && b != mine) std::memcpy(b, mine, c);
  for (int p = 1; p < t.size(); ++p) t.recv(p, b + static_cast<size_t>(p) * c, c);
  t.wait_all();
}

}  // namespace

void hierarchical_all_gather(Transport& t, Workspace& ws, const AlgorithmConfig& cfg,
                             const HostMap& map, TensorView in, TensorView out) {
  COLLIE_CHECK(map.uniform, "hierarchical all_gather over hosts of different sizes");
  const int me = t.rank();
  const int l = map.local_index[me];
  const size_t bytes = in.nbytes();
  auto* o = static_cast<uint8_t*>(out.data);
  const auto& host = map.hosts[map.host_of[me]];
  if (out.nbytes() <= cfg.small_message_bytes) {
    // (1) the host's inputs to its leader; (2) the leaders all_gather the
    // host blocks (L c bytes each) over TCP; (3) each leader sends the
    // whole gathered buffer to its host peers; (4) every rank puts each
    // block's slots where their ranks go. (H-1) messages per host cross the
    // network, not L (H-1), and no peer memory is read.
    const size_t L = host.size(), H = map.hosts.size(), block = L * bytes;
    auto* staging = static_cast<uint8_t*>(ws.get(6, std::max<size_t>(1, H * block)));
    const size_t h_me = static_cast<size_t>(map.host_of[me]);
    gather_to_leader(t, host, in.data, staging + h_me * block, bytes);
    if (l == 0) {
      std::vector<uint8_t*> slots;
      for (size_t h = 0; h < H; ++h) slots.push_back(staging + h * block);
      Transport::SubgroupScope scope(t, column(map, 0));
      all_gather(t, cfg, TensorView{staging + h_me * block, block, DataType::kUInt8, in.device},
                 slots);
    }
    if (L > 1) {
      Transport::SubgroupScope scope(t, host);
      if (t.rank() == 0) {
        for (int p = 1; p < t.size(); ++p) t.send(p, staging, H * block);
      } else {
        t.recv(0, staging, H * block);
      }
      t.wait_all();
    }
    for (size_t h = 0; h < H && bytes > 0; ++h)
      for (size_t k = 0; k < L; ++k)
        std::memcpy(o + static_cast<size_t>(map.hosts[h][k]) * bytes, staging + (h * L + k) * bytes,
                    bytes);
    return;
  }
  {
    const std::vector<int> peers = column(map, l);
    std::vector<uint8_t*> slots;
    for (int r : peers) slots.push_back(o + static_cast<size_t>(r) * bytes);
    Transport::SubgroupScope scope(t, peers);
    all_gather(t, cfg, in, slots);
  }
  if (host.size() < 2) return;
  Transport::SubgroupScope scope(t, host);
  shm_copy_peer_chunks(t, out.data, bytes, [&](int peer_local) {
    std::vector<size_t> at;
    for (const auto& h : map.hosts) at.push_back(static_cast<size_t>(h[peer_local]) * bytes);
    return at;
  });
}

void hierarchical_reduce_scatter(Transport& t, Workspace& ws, const AlgorithmConfig& cfg,
                                 const HostMap& map, TensorView in, TensorView out, ReduceOp op) {
  COLLIE_CHECK(map.uniform, "hierarchical reduce_scatter over hosts of different sizes");
  const int me = t.rank(), world = t.size();
  const int l = map.local_index[me];
  const ReduceOp level_op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  const size_t n = out.count, es = element_size(out.dtype), H = map.hosts.size();
  if (in.nbytes() <= cfg.small_message_bytes) {
    // (1) the host's inputs reduced to its leader (the flat reduce: every
    // host rank sends the leader its input, which it reduces in local
    // order); (2) the leaders reorder the sum host-major and reduce_scatter
    // it over TCP, host h's leader getting host h's L chunks; (3) each
    // leader sends its host peers their chunk. (H-1) messages per host
    // cross the network, not L (H-1).
    const auto& host = map.hosts[map.host_of[me]];
    const size_t L = host.size(), total = in.count;
    auto* sum = static_cast<uint8_t*>(ws.get(6, std::max<size_t>(1, total * es)));
    auto* ordered = static_cast<uint8_t*>(ws.get(7, std::max<size_t>(1, total * es)));
    const TensorView sum_view{sum, total, in.dtype, in.device};
    if (L > 1) {
      Transport::SubgroupScope scope(t, host);
      reduce(t, ws, cfg, in, sum_view, level_op, 0);
    } else if (total > 0) {
      std::memcpy(sum, in.data, total * es);
    }
    if (l == 0) {
      for (size_t h = 0; h < H && n > 0; ++h)
        for (size_t k = 0; k < L; ++k)
          std::memcpy(ordered + (h * L + k) * n * es,
                      sum + static_cast<size_t>(map.hosts[h][k]) * n * es, n * es);
      std::vector<const uint8_t*> slots;
      for (size_t h = 0; h < H; ++h) slots.push_back(ordered + h * L * n * es);
      Transport::SubgroupScope scope(t, column(map, 0));
      reduce_scatter(t, ws, cfg, slots, TensorView{sum, L * n, out.dtype, out.device}, level_op);
    }
    {
      Transport::SubgroupScope scope(t, host);
      if (t.rank() == 0) {
        for (int p = 1; p < t.size(); ++p) t.send(p, sum + static_cast<size_t>(p) * n * es, n * es);
        if (n > 0) std::memcpy(out.data, sum, n * es);
      } else {
        t.recv(0, out.data, n * es);
      }
      t.wait_all();
    }
    if (op == ReduceOp::kAvg) divide_by(ws, out.data, n, out.dtype, world);
    return;
  }
  auto* staging = static_cast<uint8_t*>(ws.get(5, std::max<size_t>(1, H * n * es)));
  const std::vector<int> peers = column(map, l);
  {
    const auto& host = map.hosts[map.host_of[me]];
    std::vector<size_t> begins;
    for (int r : peers) begins.push_back(static_cast<size_t>(r) * n);
    if (host.size() > 1) {
      Transport::SubgroupScope scope(t, host);
      shm_reduce_chunks(t, ws, in, begins, n, staging, level_op);
    } else {
      for (size_t h = 0; h < H; ++h)
        std::memcpy(staging + h * n * es, static_cast<const uint8_t*>(in.data) + begins[h] * es,
                    n * es);
    }
  }
  {
    std::vector<const uint8_t*> slots;
    for (size_t h = 0; h < H; ++h) slots.push_back(staging + h * n * es);
    Transport::SubgroupScope scope(t, peers);
    reduce_scatter(t, ws, cfg, slots, out, level_op);
  }
  if (op == ReduceOp::kAvg) divide_by(ws, out.data, n, out.dtype, world);
}

void hierarchical_reduce(Transport& t, Workspace& ws, const AlgorithmConfig& cfg,
                         const HostMap& map, TensorView in, TensorView out, ReduceOp op, int root) {
  COLLIE_CHECK(map.uniform, "hierarchical reduce over hosts of different sizes");
  const int me = t.rank(), world = t.size();
  const int l = map.local_index[me];
  const int root_host = map.host_of[root];
  const auto& host = map.hosts[map.host_of[me]];
  const size_t L = host.size();
  const ReduceOp level_op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  const size_t n = in.count, es = element_size(in.dtype);
  const size_t lo = part_begin(n, L, static_cast<size_t>(l));
  const size_t hi = part_begin(n, L, static_cast<size_t>(l) + 1);
  auto* slice = static_cast<uint8_t*>(ws.get(5, std::max<size_t>(1, (hi - lo) * es)));
  if (L > 1) {
    Transport::SubgroupScope scope(t, host);
    const size_t begins[] = {lo};
    shm_reduce_chunks(t, ws, in, begins, hi - lo, slice, level_op);
  } else if (hi > lo) {
    std::memcpy(slice, static_cast<const uint8_t*>(in.data) + lo * es, (hi - lo) * es);
  }
  // Every rank of a column has the same bounds: an empty slice skips the
  // step on all of them.
  if (hi > lo) {
    const TensorView s{slice, hi - lo, in.dtype, in.device};
    Transport::SubgroupScope scope(t, column(map, l));
    reduce(t, ws, cfg, s, s, level_op, root_host);
  }
  if (map.host_of[me] != root_host) return;
  if (L > 1) {
    Transport::SubgroupScope scope(t, host);
    shm_gather_parts(t, slice, out.data, map.local_index[root], [&](int p) {
      const size_t a = part_begin(n, L, static_cast<size_t>(p)),
                   b = part_begin(n, L, static_cast<size_t>(p) + 1);
      return std::pair<size_t, size_t>{a * es, (b - a) * es};
    });
  } else if (n > 0) {
    std::memcpy(out.data, slice, n * es);
  }
  if (me == root && op == ReduceOp::kAvg) divide_by(ws, out.data, n, out.dtype, world);
}

void hierarchical_barrier(Transport& t, const HostMap& map) {
  const int me = t.rank();
  const auto& host = map.hosts[map.host_of[me]];
  const int leader = host[0];
  if (me != leader) {
    t.send(leader, nullptr, 0);  // arrived
    t.recv(leader, nullptr, 0);  // released
    t.wait_all();
    return;
  }
  for (size_t i = 1; i < host.size(); ++i) t.recv(host[i], nullptr, 0);
  t.wait_all();
  {
    std::vector<int> leaders;
    for (const auto& h : map.hosts) leaders.push_back(h[0]);
    Transport::SubgroupScope scope(t, leaders);
    dissemination_barrier(t);
  }
  for (size_t i = 1; i < host.size(); ++i) t.send(host[i], nullptr, 0);
  t.wait_all();
}

}  // namespace collie
