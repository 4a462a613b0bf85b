#include "collie/collectives/transport/join.h"

#include <unistd.h>

#include <cstdlib>
#include <map>
#include <random>
#include <utility>

#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/transport/channel_factory.h"
#include "collie/collectives/transport/host.h"
#include "collie/collectives/transport/sockets.h"
#include "collie/collectives/transport/wire.h"

namespace collie {
namespace {

std::string random_hex() {
  std::random_device rd;
  return str_cat(std::hex, rd(), rd());
}

}  // namespace

TransportChoice resolve_transport(const std::string& option) {
  const std::string& v = option;
  if (v.empty() || v == "auto") return TransportChoice::kAuto;
  if (v == "tcp") return TransportChoice::kTcp;
  if (v == "shm") return TransportChoice::kShm;
  throw InvalidArgument(str_cat("transport '", v,
                                "' (COLLIE_TRANSPORT or the transport option): expected auto, "
                                "tcp or shm"));
}

Bootstrap join_group(Store& store, int rank, int size, const CommunicatorOptions& options) {
  const Deadline deadline(options.timeout);
  const TransportChoice choice = resolve_transport(options.transport);
  const std::string host =
      resolve_bind_host(options.bind_host, options.interface, options.route_host);
  const std::string me = host_id(options.host_id);

  // Listen first, publish second: a peer that reads our record can connect
  // at once (the kernel queues it until we accept). The channel factories,
  // most preferred first: the local channel (shared memory) for the peers
  // on this host unless TCP is forced, then TCP, which also gives this rank
  // its address (with COLLIE_TRANSPORT=shm it only listens).
  Bootstrap out;
  std::vector<std::unique_ptr<ChannelFactory>> factories;
  if (choice != TransportChoice::kTcp) {
    factories.push_back(make_local_factory(
        str_cat("collie-", group_hash(options.store_prefix), "-", rank, "-", random_hex()), me,
        options.shm_buffer_bytes, rank));
  }
  factories.push_back(make_tcp_factory(host, rank, size, options.socket_buffer_bytes,
                                       choice != TransportChoice::kShm));
  out.address = factories.back()->address();
  PeerRecord mine;
  mine.fields = {{"tcp", out.address}, {"host", me}, {"pid", std::to_string(::getpid())}};
  for (const auto& f : factories)
    if (!f->address().empty()) mine.fields[std::string(f->key())] = f->address();

  // The join round: the n-th arrival at this prefix joins round (n-1)/size,
  // so a group re-created under the same name never reads an earlier
  // group's records.
  const std::string prefix = str_cat(options.store_prefix, "/collectives");
  const int64_t arrival = store.add(str_cat(prefix, "/arrivals"), 1);
  const std::string base = str_cat(prefix, "/", (arrival - 1) / size);
  auto key = [&](std::string_view what) { return str_cat(base, "/", what); };
  const std::string ready_key = key("ready");

  // Publishing with compare_set catches a second process with this rank:
  // it finds the first one's record and tells every rank.
  const std::string mine_text = mine.encode();
  const std::string addr_key = key(str_cat("addr/", rank));
  const std::string current = to_string(store.compare_set(addr_key, {}, to_bytes(mine_text)));
  if (current != mine_text) {
    const PeerRecord first = PeerRecord::decode(current);
    const std::string error = str_cat("rank ", rank, " joined group '", options.store_prefix,
                                      "' twice, from ", first.describe(), " and from ",
                                      mine.describe(), ": two processes were given the same RANK");
    // The extra process also pushed a rank of this group into the next
    // round: tell that one too.
    store.set(ready_key, str_cat("error: ", error));
    store.set(str_cat(prefix, "/", (arrival - 1) / size + 1, "/ready"), str_cat("error: ", error));
    throw NetworkError(error);
  }
  const std::string host_key = key(str_cat("host/", me));
  store.add(host_key, 1);
  if (store.add(key("joined"), 1) == size) store.set(ready_key, "ok");
  try {
    store.wait({ready_key}, deadline.remaining());
  } catch (const TimeoutError&) {
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back(key(str_cat("addr/", r)));
    std::vector<std::string> missing;
    for (int r = 0; r < size; ++r) {
      if (!store.check({keys[r]})) missing.push_back(std::to_string(r));
    }
    // Leave no trace, so that a retry under the same name is no duplicate.
    store.delete_key(addr_key);
    store.add(key("joined"), -1);
    throw TimeoutError(str_cat("rank ", rank, " (", out.address, ") waited ", deadline.describe(),
                               " for rank(s) ", join(missing, ", "), " to join group '",
                               options.store_prefix,
                               "' (they never published their address "
                               "under '",
                               base, "/addr/<rank>')"));
  }
  const std::string ready = to_string(store.get(ready_key));
  if (ready.rfind("error: ", 0) == 0) throw NetworkError(ready.substr(7));
  out.local_ranks = static_cast<int>(store.add(host_key, 0));

  // The ring neighbours, which nearly every algorithm talks to, in one
  // request; other peers are read when first needed. A group spanning hosts
  // reads every record instead: the hierarchical algorithms need the host
  // of every rank (and talk to most of them).
  const int left = (rank + size - 1) % size, right = (rank + 1) % size;
  std::vector<int> peers{left};
  if (right != left) peers.push_back(right);
  const bool host_map =
      out.local_ranks < size && choice != TransportChoice::kTcp && size <= kHostMapMaxRanks;
  if (host_map) {
    peers.clear();
    for (int p = 0; p < size; ++p) peers.push_back(p);
  }
  std::vector<std::string> keys;
  for (int p : peers) keys.push_back(key(str_cat("addr/", p)));
  const std::vector<Bytes> values = store.multi_get(keys);
  std::map<std::string, int> hosts;  // host id -> host number
  std::map<int, PeerRecord> known;
  for (size_t i = 0; i < peers.size(); ++i) {
    PeerRecord r = PeerRecord::decode(to_string(values[i]));
    if (host_map) out.host_of.push_back(hosts.emplace(r.host(), hosts.size()).first->second);
    if (peers[i] != rank) known[peers[i]] = std::move(r);
  }
  out.linker =
      make_linker(store, rank, size, options, choice,
                  LinkerSetup{base, me, out.address, std::move(factories)}, std::move(known));
  COLLIE_LOG(kDebug) << "rank " << rank << " joined as " << out.address << " with "
                     << out.local_ranks << " rank(s) on its host";
  return out;
}

}  // namespace collie
