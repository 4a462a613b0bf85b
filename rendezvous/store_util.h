// Helpers shared by the Store implementations.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "collie/rendezvous/store.h"

namespace collie {

// Parses a counter stored by add() (ASCII decimal, optional sign). Throws
// StoreError naming the operation (`op`: "add", "barrier"), the key and the
// bad value.
int64_t parse_counter(const std::string& key, std::span<const uint8_t> value,
                      const char* op = "add");

// The counter `key` holds after adding `delta` to `current` (nullptr: a
// missing key counts from 0). Throws StoreError naming the key, the value
// and the delta when it is not an integer or the sum does not fit int64:
// the store then leaves the value as it was.
int64_t add_counter(const std::string& key, const Bytes* current, int64_t delta,
                    const char* op = "add");

// Throws InvalidArgument "<what> is <value>: allowed <min> to <max>" when
// value is out of [min, max]; `what` names the option ("TcpStoreServerOptions::max_connections").
void check_option_range(const char* what, uint64_t value, uint64_t min, uint64_t max);

}  // namespace collie
