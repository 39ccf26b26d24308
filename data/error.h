#pragma once

#include <stdexcept>
#include <string>

namespace pinfeed {

// Bad or missing input data (dataset folders, images). The CLI maps it to exit code 3.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace pinfeed
