// A checkpoint's tensors by their official names, and the errors raised while reading one.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <stdexcept>
#include <string>

namespace varscope {

// Ordered so that listings and error messages are deterministic.
using StateDict = std::map<std::string, at::Tensor>;

// Any problem with a checkpoint file or its contents. The message names the file and, where it
// applies, the tensor, and says what was expected.
class CheckpointError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

}  // namespace varscope
