// Catch2's session, compiled once (catch_session.cc) for every test
// executable: its implementation is the slowest file to compile in a test,
// and a main() of its own (test/support/main.cc, the GPU tests' mains)
// needs only this.
#pragma once

namespace collie::test {

// Catch::Session().run(argc, argv): runs the cases the arguments select and
// returns the exit code.
int run_catch_session(int argc, char** argv);

}  // namespace collie::test
