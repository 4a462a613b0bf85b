// The main() of every test executable: either a registered child process
// (test/support/child.h) or the Catch2 session.
#include <csignal>

#include "collie/test/support/catch_session.h"
#include "collie/test/support/child.h"

int main(int argc, char** argv) {
  // A peer dying must surface as an error on the socket, not kill us.
  std::signal(SIGPIPE, SIG_IGN);
  int rc = collie::test::run_child_if_requested(argc, argv);
  if (rc >= 0) return rc;
  return collie::test::run_catch_session(argc, argv);
}
