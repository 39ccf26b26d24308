// The C++ side of test_feed.py: writes a synthetic ImageFolder, and dumps the batches of a data::Loader (no
// pipeline, no Python) for the options given, for the module's batches to be compared with.
//   feed_reference gen OUT CLASSES PER_CLASS SIDE
//       OUT/train/<class>/*.jpg (and OUT/val/...)
//   feed_reference dump SPLIT_DIR BATCH SIDE SEED EPOCH TRAIN(0|1) FORMAT(float32|uint8) BATCHES OUT
//       BATCHES batches of epoch EPOCH, shuffled and dropping the last partial batch when TRAIN, 2 workers, each
//       batch's images (float32 CHW normalised, or uint8 HWC) then its labels (int64), back to back in OUT
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "data/dataset/dataset.h"
#include "data/dataset/image_folder.h"
#include "data/dataset/synthetic.h"
#include "data/loader/loader.h"
#include "tests/host_arena.h"

namespace {

using namespace pinfeed::data;

int gen(char** a) {
  SyntheticOptions o;
  o.out = a[0];
  o.classes = std::atoi(a[1]);
  o.train_per_class = std::atoi(a[2]);
  o.val_per_class = 1;
  o.width = o.height = std::atoi(a[3]);
  o.threads = 2;
  generate_synthetic(o);
  return 0;
}

int dump(char** a) {
  const std::filesystem::path dir = std::filesystem::absolute(a[0]).lexically_normal();
  const bool train = std::string(a[5]) == "1";
  TransformOptions t;
  t.size = std::atoi(a[2]);
  t.format = std::string(a[6]) == "uint8" ? PixelFormat::kUint8Hwc : PixelFormat::kFloat32Chw;
  auto dataset = std::make_shared<const Dataset>(scan_image_folder(dir.parent_path().string(), dir.filename().string()),
                                                 t, train, BadImagePolicy::kSkip);
  LoaderOptions o;
  o.batch_size = std::atoll(a[1]);
  o.workers = 2;
  o.seed = std::strtoull(a[3], nullptr, 10);
  o.shuffle = o.drop_last = train;
  pinfeed::test::HostArena arena(o.prefetch_batches + 1, o.batch_size, dataset->image_bytes());
  Loader loader(dataset, o, &arena);
  loader.start_epoch(std::atoll(a[4]));
  std::ofstream out(a[8], std::ios::binary);
  for (int64_t i = 0, n = std::atoll(a[7]); i < n; ++i) {
    const auto batch = loader.next();
    if (!batch) break;
    out.write(static_cast<const char*>(batch->memory.images), batch->size * dataset->image_bytes());
    out.write(reinterpret_cast<const char*>(batch->memory.labels), batch->size * sizeof(int64_t));
    loader.recycle(*batch);
  }
  return out.good() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  try {
    if (command == "gen" && argc == 6) return gen(argv + 2);
    if (command == "dump" && argc == 11) return dump(argv + 2);
  } catch (const std::exception& e) {
    std::cerr << "feed_reference: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "usage: feed_reference gen OUT CLASSES PER_CLASS SIDE | dump SPLIT_DIR BATCH SIDE SEED EPOCH TRAIN "
               "FORMAT BATCHES OUT\n";
  return 2;
}
