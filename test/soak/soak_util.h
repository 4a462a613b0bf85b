// Shared by the load tests: process samples (resident memory, open
// descriptors), the duration knob, and recording results for the docs.
#pragma once

#include <cstdint>
#include <string>

namespace collie::test {

struct ProcessSample {
  int64_t rss_kb = 0;  // VmRSS from /proc/self/status
  int fds = 0;         // entries of /proc/self/fd
};
ProcessSample sample_process();

// The duration from environment variable `name` (seconds), or fallback.
double soak_seconds(const char* name, double fallback);

// Prints "[soak] <name>:" and each line of `text`, and appends them to
// $COLLIE_FAULTS_RECORD when set.
void soak_record(const std::string& name, const std::string& text);

}  // namespace collie::test
