#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace pinfeed {

// Bad or missing input data (dataset folders, images). The CLI maps it to exit code 3.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace data {

// A loader worker spent longer than LoaderOptions::sample_timeout_s on one sample (a read that never returns, a
// decoder looping inside its library): the input is at fault, as for an unreadable image, so it is a DataError
// (exit code 3) and names the file.
class StuckSample : public DataError {
 public:
  using DataError::DataError;
};

// The run was asked to stop (LoaderOptions::stop_requested) while waiting for the input pipeline. Not a DataError:
// nothing is wrong with the data, and the caller ends the run as for any stop it asked for.
class Interrupted : public std::exception {
 public:
  const char* what() const noexcept override {
    return "interrupted: a stop was requested while waiting for the next batch";
  }
};

}  // namespace data
}  // namespace pinfeed
