// The ranks of a simulated job, as one process of store_scale runs them:
// ranks [first, last) of `world`, each one non-blocking TCP connection to
// the store on one Asio event loop (no thread per rank), each doing what a
// rank's init does with the store:
//
//   1. set its address under "addr/<rank>" and add 1 to "count"
//      (one write, one 8-byte answer);
//   2. the rank whose add brings the count to `world` sets "barrier";
//      every rank waits for "barrier" (WAIT, one byte back);
//   3. it reads the addresses of its two ring neighbours: one MULTI_GET in
//      the 2.x dialect, two GETs in 1.13 (which has no MULTI_GET), and checks
//      them.
//
// A connect that fails is retried with capped exponential back-off and full
// jitter, as collie's client does; a connection lost after connecting fails
// its rank, and then the whole job (this process stops at once).
#pragma once

#include <cstdint>
#include <string>

#include "collie/base/deadline.h"

namespace collie::bench {

enum class SimDialect { kV2, kV1_13 };

// What one process's ranks did. A plain struct: it crosses a pipe.
struct SimulationReport {
  int64_t done = 0;               // ranks that completed all three steps
  int64_t failed = 0;             // ranks that lost their connection after connecting
  int64_t unfinished = 0;         // ranks still waiting when the time was up
  int64_t connect_retries = 0;    // connect attempts that failed and were retried
  int64_t wrong_values = 0;       // neighbour addresses that were not what was set
  int64_t last_done_ns = 0;       // steady clock (ns since its epoch): the last rank's end
  int64_t last_connected_ns = 0;  // the same clock: the last rank's connect
  // Connects that took over 0.9 s and over 2.9 s: a SYN that a full accept
  // queue dropped is sent again after 1 s, then after 3 s.
  int64_t slow_connects[2] = {};
  char first_error[240] = {};  // the first failure, for the report
};

// The address rank `rank` publishes (about 20 bytes, as a real one).
std::string simulated_address(int rank);

// Runs ranks [first, last) of `world` against the store at 127.0.0.1:port
// until all finish or `limit` passes.
SimulationReport simulate_ranks(uint16_t port, int first, int last, int world, SimDialect dialect,
                                Timeout limit);

}  // namespace collie::bench
