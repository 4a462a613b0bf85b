// Uses installed collie headers and libraries from another project.
#include <iostream>

#include "rendezvous/hash_store.h"
#include "runtime/build_info.h"

int main() {
  std::cout << collie::build_info() << "\n";
  collie::HashStore store;
  store.set("hello", "world");
  store.add("counter", 2);
  int64_t counter = store.add("counter", 3);
  std::cout << "store ok: value=" << collie::to_string(store.get("hello")) << " counter=" << counter
            << "\n";
  return 0;
}
