// NCCL facts CPU code may ask for without including nccl.h.
#pragma once

#include <string>

namespace collie::nccl {

// "2.28.3": the version of the NCCL library loaded at run time.
std::string version_string();

}  // namespace collie::nccl
