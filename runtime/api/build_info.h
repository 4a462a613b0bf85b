// What this build of collie contains: version and optional backends.
#pragma once

#include <string>

namespace collie {

// "collie 0.1.0 (nccl 2.28.3, cuda: yes)" or "collie 0.1.0 (cpu only)".
std::string build_info();
bool built_with_nccl();
bool built_with_cuda();

}  // namespace collie
