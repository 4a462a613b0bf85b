// libFuzzer target for the TcpStore server's parser (store_protocol.h):
//   cmake -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DCOLLIE_FUZZ=ON
//   ninja -C build-fuzz store_parser_fuzz
//   mkdir -p /tmp/new
//   build-fuzz/bin/store_parser_fuzz -max_total_time=60 /tmp/new test/fuzz/corpus/store_parser
// The same driver replays the committed corpus in every normal build
// (test_rendezvous_tcp_store "[parser]").
#include <cstdint>
#include <cstdio>
#include <stdexcept>

#include "collie/test/fuzz/store_parser_driver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    collie::fuzz::fuzz_store_parser(data, size);
  } catch (const std::logic_error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    __builtin_trap();
  }
  return 0;
}
