// Helpers shared by the Store implementations.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace collie {

// Parses a counter stored by add() (ASCII decimal, optional sign). Throws
// StoreError naming the key and the bad value.
int64_t parse_counter(const std::string& key, std::span<const uint8_t> value);

}  // namespace collie
