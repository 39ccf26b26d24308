// torch.save's zip archive read whole from disk and opened; its pickle goes to torch_pickle.cpp.
#include "engine/checkpoint/torch_file.h"

#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "engine/errors.h"
#include "engine/checkpoint/torch_pickle.h"
#include "data/error.h"
#include "data/transform/transforms.h"

namespace pinfeed::engine {
namespace {

using torch_file::damaged;
using torch_file::first_line;
using torch_file::foreign;

class MemoryReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit MemoryReader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<size_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::vector<uint8_t>& bytes_;
};

// Whether a zip's end-of-central-directory record is there: without it the file was cut short.
bool has_zip_end(const std::vector<uint8_t>& b) {
  const size_t from = b.size() > 65557 ? b.size() - 65557 : 0;  // the record (22 bytes) + its longest comment
  for (size_t i = b.size() >= 22 ? b.size() - 22 + 1 : 0; i-- > from;) {
    if (b[i] == 'P' && b[i + 1] == 'K' && b[i + 2] == 5 && b[i + 3] == 6) return true;
  }
  return false;
}

uint64_t le(const std::vector<uint8_t>& b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes; i-- > 0;) v = v << 8 | b[at + i];
  return v;
}

// Each entry's data against the CRC-32 its central directory records: LibTorch's reader skips that check, so a
// flipped byte in a tensor would load silently. Stored (uncompressed) entries only, as torch.save writes them.
void check_crcs(const std::vector<uint8_t>& b, const std::string& path) {
  const auto bad = [&](const std::string& why) { damaged(path, why); };
  size_t end = std::string::npos;  // the end-of-central-directory record, searched from the back
  for (size_t i = b.size() >= 22 ? b.size() - 22 + 1 : 0; i-- > 0 && b.size() - i <= 65557;) {
    if (le(b, i, 4) == 0x06054b50) {
      end = i;
      break;
    }
  }
  if (end == std::string::npos) bad("the zip archive has no end (a partly written or partly copied file)");
  uint64_t entries = le(b, end + 10, 2), dir = le(b, end + 16, 4);
  if ((entries == 0xFFFF || dir == 0xFFFFFFFF) && end >= 20 && le(b, end - 20, 4) == 0x07064b50) {  // zip64
    const uint64_t at = le(b, end - 20 + 8, 8);
    if (at + 56 > b.size() || le(b, at, 4) != 0x06064b50) bad("the zip64 directory is out of place");
    entries = le(b, at + 32, 8), dir = le(b, at + 48, 8);
  }
  for (uint64_t e = 0; e < entries; ++e) {
    if (dir + 46 > b.size() || le(b, dir, 4) != 0x02014b50) bad("the zip directory is damaged");
    const uint64_t method = le(b, dir + 10, 2), crc = le(b, dir + 16, 4);
    uint64_t size = le(b, dir + 20, 4), local = le(b, dir + 42, 4);
    const uint64_t name_len = le(b, dir + 28, 2), extra_len = le(b, dir + 30, 2), comment_len = le(b, dir + 32, 2);
    if (dir + 46 + name_len + extra_len > b.size()) bad("the zip directory is damaged");
    const std::string name(reinterpret_cast<const char*>(&b[dir + 46]), name_len);
    // zip64: the sizes and offset that did not fit 32 bits follow in this order in the extra field 0x0001.
    for (uint64_t x = dir + 46 + name_len, x_end = x + extra_len; x + 4 <= x_end;) {
      const uint64_t id = le(b, x, 2), n = le(b, x + 2, 2);
      if (id == 1) {
        uint64_t f = x + 4;
        if (le(b, dir + 24, 4) == 0xFFFFFFFF) f += 8;  // the uncompressed size, equal to the stored one
        if (size == 0xFFFFFFFF && f + 8 <= x_end) size = le(b, f, 8), f += 8;
        if (local == 0xFFFFFFFF && f + 8 <= x_end) local = le(b, f, 8);
      }
      x += 4 + n;
    }
    if (local + 30 > b.size() || le(b, local, 4) != 0x04034b50) bad("entry '" + name + "' is out of place");
    const uint64_t data = local + 30 + le(b, local + 26, 2) + le(b, local + 28, 2);
    if (data + size > b.size()) bad("entry '" + name + "' runs past the end of the file");
    if (method == 0 && crc32_z(0, &b[data], size) != crc) {
      bad("entry '" + name + "' fails its CRC-32 check (its bytes changed after it was written)");
    }
    dir += 46 + name_len + extra_len + comment_len;
  }
}

}  // namespace

std::vector<uint8_t> read_torch_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) throw CheckpointError(path + ": no such file");
    throw DataError(path + ": cannot open: " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) throw CheckpointError(path + ": a directory, not a checkpoint file");
  std::vector<uint8_t> bytes;
  try {
    // Opens with O_NONBLOCK and checks the open file (a FIFO never blocks, /dev/zero never streams).
    data::read_file(path, bytes, kMaxTorchFileBytes);
  } catch (const std::runtime_error& e) {
    const std::string why = e.what();
    if (why.rfind("cannot open", 0) == 0 || why.rfind("read error", 0) == 0 || why.rfind("short read", 0) == 0) {
      throw DataError(path + ": " + why);
    }
    const bool over = why.find("over the limit") != std::string::npos;
    throw CheckpointError(path + ": " + (over ? "larger than " + std::to_string(kMaxTorchFileBytes >> 30) +
                                                " GiB: not a ResNet-50 checkpoint or state dict"
                                          : why + ": not a checkpoint file"));
  }
  return bytes;
}

c10::IValue parse_torch_file(const std::vector<uint8_t>& bytes, const std::string& path) {
  const bool zip = bytes.size() >= 4 && bytes[0] == 'P' && bytes[1] == 'K' && bytes[2] == 3 && bytes[3] == 4;
  if (!zip) {
    if (!bytes.empty() && bytes[0] == 0x80) {
      foreign(path, "a bare pickle, as torch.save wrote before PyTorch 1.6 (_use_new_zipfile_serialization=False); "
                    "save it again with a current torch.save");
    }
    foreign(path, "not a zip archive");
  }
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> archive;
  try {
    archive = std::make_unique<caffe2::serialize::PyTorchStreamReader>(std::make_shared<MemoryReader>(bytes));
  } catch (const c10::Error& e) {
    if (!has_zip_end(bytes)) damaged(path, "the zip archive has no end (a partly written or partly copied file)");
    foreign(path, "a zip archive but not torch.save's (" + first_line(e) + ")");
  }
  check_crcs(bytes, path);
  std::vector<uint8_t> pickle;
  try {
    if (!archive->hasRecord("data.pkl")) foreign(path, "a zip archive without data.pkl");
    if (archive->hasRecord("byteorder")) {
      const auto [order, n] = archive->getRecord("byteorder");
      if (std::string(static_cast<const char*>(order.get()), n) != "little") foreign(path, "big-endian tensors");
    }
    const auto [data, n] = archive->getRecord("data.pkl");
    const auto* b = static_cast<const uint8_t*>(data.get());
    pickle.assign(b, b + n);
  } catch (const c10::Error& e) {
    damaged(path, first_line(e));
  }
  return torch_file::unpickle(pickle, *archive, path);
}

}  // namespace pinfeed::engine
