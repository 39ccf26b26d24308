// BadImages: every rank's bad files gathered to rank 0, which lists and counts them.
#include "app/train/bad_images.h"

#include <filesystem>
#include <vector>

#include "common/log.h"
#include "data/dataset/dataset.h"

namespace pinfeed::app {
namespace {

// The bad files a rank found since the last gather, as bytes for the gather to rank 0: for each, 't' (training
// set) or 'v' (validation set), then its path and reason as <length>:<bytes> (a path may hold any byte but NUL,
// a decoder's message any byte at all).
std::string pack_bad_images(const std::vector<data::BadImage>& train, const std::vector<data::BadImage>& val) {
  std::string out;
  auto field = [&](const std::string& s) { out += std::to_string(s.size()) + ":" + s; };
  for (const auto* list : {&train, &val}) {
    for (const data::BadImage& b : *list) {
      out += list == &train ? 't' : 'v';
      field(b.path);
      field(b.reason);
    }
  }
  return out;
}

void unpack_bad_images(const std::string& bytes, std::vector<data::BadImage>& train, std::vector<data::BadImage>& val) {
  size_t at = 0;
  auto field = [&] {
    const size_t colon = bytes.find(':', at);
    const size_t n = std::stoul(bytes.substr(at, colon - at));
    at = colon + 1 + n;
    return bytes.substr(colon + 1, n);
  };
  while (at < bytes.size()) {
    const char set = bytes[at++];
    data::BadImage b;
    b.path = field();
    b.reason = field();
    (set == 't' ? train : val).push_back(std::move(b));
  }
}

}  // namespace

void BadImages::count_listed(const RunOutputs& out) {
  const std::string train_dir = (std::filesystem::path(sets_.train->folder().root) / "").string();
  for (const std::string& path : out.bad_images_listed()) {
    if (path.rfind(train_dir, 0) == 0) train_bad_.insert(path);
  }
}

void BadImages::record(RunOutputs* out) {
  std::vector<data::BadImage> train = sets_.train->take_new_bad_images(), val;
  if (sets_.val) val = sets_.val->take_new_bad_images();
  if (dist_.active()) {
    const std::vector<std::string> all = dist_.all_gather_bytes(pack_bad_images(train, val));
    train.clear();
    val.clear();
    for (const std::string& bytes : all) unpack_bad_images(bytes, train, val);
  }
  if (!out) return;
  out->bad_images(train);
  out->bad_images(val);
  for (const data::BadImage& b : train) train_bad_.insert(b.path);
}

void BadImages::list_found(RunOutputs& out) noexcept {
  try {
    out.bad_images(sets_.train->take_new_bad_images());
    if (sets_.val) out.bad_images(sets_.val->take_new_bad_images());
  } catch (const std::exception& e) {
    log::warn(std::string("could not list the bad images found: ") + e.what());
  }
}

}  // namespace pinfeed::app
