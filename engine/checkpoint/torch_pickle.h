// The parts of torch_file.cpp's reader that its pickle machine (torch_pickle.cpp) shares.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pinfeed::engine::torch_file {

// The file is not what was asked for (CheckpointError, exit 2) or is damaged (DataError, exit 3): one line each,
// naming the file.
[[noreturn]] void foreign(const std::string& path, const std::string& why);
[[noreturn]] void damaged(const std::string& path, const std::string& why);

std::string first_line(const c10::Error& e);  // a LibTorch error's first line, without its backtrace

// The object data.pkl (`pickle`) describes, its tensors' storages read from `archive`. A pickle machine for the
// opcodes of protocols 2 to 5 that plain data uses; everything it builds is an IValue (dicts with Any keys and
// values, as LibTorch's unpickler makes them). Throws as parse_torch_file.
c10::IValue unpickle(const std::vector<uint8_t>& pickle, caffe2::serialize::PyTorchStreamReader& archive,
                     const std::string& path);

}  // namespace pinfeed::engine::torch_file
