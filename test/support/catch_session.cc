// The one translation unit that compiles Catch2's implementation (see
// catch_session.h).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "collie/test/support/catch_session.h"

namespace collie::test {

int run_catch_session(int argc, char** argv) { return Catch::Session().run(argc, argv); }

}  // namespace collie::test
