// The error hierarchy every public collie API throws. Inside Asio code we use
// std::error_code and convert once, at the layer boundary, into one of these.
#pragma once

#include <stdexcept>
#include <string>

namespace collie {

// Base of every collie exception.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The caller passed something wrong: sizes, ranks, URLs, dtypes.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A deadline passed: a store wait, a connect, a collective.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A socket failed: a peer died, reset, or a connect was refused.
class NetworkError : public Error {
 public:
  using Error::Error;
};

// The key-value store failed or answered something unexpected.
class StoreError : public Error {
 public:
  using Error::Error;
};

// A backend (NCCL, CUDA) reported an error, or a group is broken.
class BackendError : public Error {
 public:
  using Error::Error;
};

}  // namespace collie
