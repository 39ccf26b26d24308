#include "data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>

#include "data/error.h"

namespace pinfeed::data {
namespace fs = std::filesystem;

bool is_image_file(const std::string& name) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

namespace {

std::vector<std::string> sorted_subdirs(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> sorted_images(const fs::path& dir) {
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink)) {
    if (entry.is_regular_file() && is_image_file(entry.path().filename().string())) {
      files.push_back(entry.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

ImageFolder scan_image_folder(const std::string& root, const std::string& split,
                              const std::vector<std::string>* classes) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    throw DataError("dataset root " + root + " is not a directory (set data.root to an ImageFolder: ROOT/" +
                    split + "/<class>/<image>)");
  }
  const fs::path dir = fs::path(root) / split;
  if (!fs::is_directory(dir, ec)) throw DataError("dataset split " + dir.string() + " does not exist");

  ImageFolder folder;
  folder.root = dir.string();
  folder.classes = sorted_subdirs(dir);
  if (folder.classes.empty()) throw DataError("dataset split " + dir.string() + " has no class folders");

  std::map<std::string, int64_t> label_of;
  const auto& names = classes ? *classes : folder.classes;
  for (size_t i = 0; i < names.size(); ++i) label_of[names[i]] = static_cast<int64_t>(i);
  for (const auto& cls : folder.classes) {
    auto it = label_of.find(cls);
    if (it == label_of.end()) {
      throw DataError("class folder " + (dir / cls).string() + " is not one of the training classes");
    }
    auto files = sorted_images(dir / cls);
    if (files.empty()) throw DataError("class folder " + (dir / cls).string() + " holds no .jpg/.jpeg/.png images");
    for (auto& f : files) folder.samples.push_back({std::move(f), it->second});
  }
  if (classes) folder.classes = *classes;
  return folder;
}

}  // namespace pinfeed::data
