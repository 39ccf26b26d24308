#include "data/dataset/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <map>

#include "common/log.h"
#include "data/error.h"

namespace pinfeed::data {
namespace fs = std::filesystem;

std::string printable(const std::string& text) { return log::printable(text); }

bool is_image_file(const std::string& name) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

namespace {

// A folder the scan cannot list (no permission, an I/O error): one line naming it, exit code 3, instead of
// std::filesystem's "filesystem error: ..." from deep in the scan.
[[noreturn]] void cannot_list(const fs::path& dir, const std::error_code& ec) {
  throw DataError("cannot list dataset folder " + printable(dir.string()) + ": " + ec.message());
}

std::vector<std::string> sorted_subdirs(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;  // a dangling link or an unreadable entry is no class folder
    if (it->is_directory(type_ec)) names.push_back(it->path().filename().string());
  }
  if (ec) cannot_list(dir, ec);
  std::sort(names.begin(), names.end());
  return names;
}

// Every image under dir, following folder symlinks as torchvision's os.walk(followlinks=True) does. A link back
// to a folder already on the way down (a loop) is refused rather than followed until the path is too long.
std::vector<std::string> sorted_images(const fs::path& dir) {
  std::vector<std::string> files;
  std::vector<fs::path> ancestors;  // canonical folders from dir down to the current entry's parent
  fs::path entering = dir;          // the folder the next step may open: the one named if it cannot be listed
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec), end;
  if (ec) cannot_list(dir, ec);
  std::error_code canonical_ec;
  ancestors.push_back(fs::canonical(dir, canonical_ec));
  for (; it != end; it.increment(ec)) {
    ancestors.resize(static_cast<size_t>(it.depth()) + 1);
    std::error_code type_ec;
    if (it->is_directory(type_ec)) {
      const fs::path real = fs::canonical(it->path(), type_ec);
      if (type_ec) cannot_list(it->path(), type_ec);
      // A loop: the link leads to a folder already on the way down, or to one above where it stands (above the
      // scan's own folder too: the scan would come back to it).
      const fs::path here = fs::canonical(it->path().parent_path(), type_ec);
      const bool above = !type_ec && std::mismatch(real.begin(), real.end(), here.begin(), here.end()).first == real.end();
      if (above || std::find(ancestors.begin(), ancestors.end(), real) != ancestors.end()) {
        throw DataError("dataset folder " + printable(it->path().string()) + " links back to " +
                        printable(real.string()) + ", a folder above it (a symlink loop); remove the link");
      }
      ancestors.push_back(real);
      entering = it->path();
    } else if (is_image_file(it->path().filename().string())) {
      // Any other entry named like an image is a sample, whatever it is: a FIFO, a device, a dangling or looping
      // link. Reading it refuses it as a bad image (read_file, data/transform/transforms.cpp), so it is named in bad_images.tsv
      // rather than silently left out.
      files.push_back(it->path().string());
    }
  }
  if (ec) cannot_list(entering, ec);
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

ImageFolder scan_image_folder(const std::string& root, const std::string& split,
                              const std::vector<std::string>* classes) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    throw DataError("dataset root " + printable(root) + " is not a directory (set data.root to an ImageFolder: ROOT/" +
                    printable(split) + "/<class>/<image>)");
  }
  const fs::path dir = fs::path(root) / split;
  if (!fs::is_directory(dir, ec)) throw DataError("dataset split " + printable(dir.string()) + " does not exist");

  ImageFolder folder;
  folder.root = dir.string();
  folder.classes = sorted_subdirs(dir);
  if (folder.classes.empty()) throw DataError("dataset split " + printable(dir.string()) + " has no class folders");

  std::map<std::string, int64_t> label_of;
  const auto& names = classes ? *classes : folder.classes;
  for (size_t i = 0; i < names.size(); ++i) label_of[names[i]] = static_cast<int64_t>(i);
  for (const auto& cls : folder.classes) {
    auto it = label_of.find(cls);
    if (it == label_of.end()) {
      throw DataError("class folder " + printable((dir / cls).string()) + " is not one of the training classes");
    }
    auto files = sorted_images(dir / cls);
    if (files.empty()) throw DataError("class folder " + printable((dir / cls).string()) + " holds no .jpg/.jpeg/.png images");
    for (auto& f : files) folder.samples.push_back({std::move(f), it->second});
  }
  if (classes) folder.classes = *classes;
  return folder;
}

}  // namespace pinfeed::data
