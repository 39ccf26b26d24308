// What torch.save wrote (a zip archive holding data.pkl and one record per tensor storage), read without Python
// and without building anything the pickle names beyond plain data: dicts (OrderedDict too), lists, tuples,
// strings, numbers and tensors. Like Python's torch.load(weights_only=True), any other global is refused, so a
// foreign pickle cannot run code or build objects; LibTorch's own unpickler is not used because it turns an
// OrderedDict (every state dict) into None and then fails an internal assert.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pinfeed::engine {

// Bytes of `path` read whole: a regular file only (a FIFO, a device or a directory is refused before any read),
// at most kMaxTorchFileBytes. Throws CheckpointError (missing, not a regular file, empty, too large) or DataError
// (unreadable).
constexpr int64_t kMaxTorchFileBytes = int64_t{4} << 30;  // a ResNet-50 checkpoint is ~200 MB; 4 GiB is the wrong file
std::vector<uint8_t> read_torch_file(const std::string& path);

// The object torch.save pickled into `bytes` (read from `path`, named in messages). Throws CheckpointError for a file
// that is not a torch.save archive or whose pickle names anything but plain data, DataError for one that is
// truncated or damaged (a storage shorter than its tensor, an archive cut short).
c10::IValue parse_torch_file(const std::vector<uint8_t>& bytes, const std::string& path);

}  // namespace pinfeed::engine
