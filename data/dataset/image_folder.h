// The ImageFolder layout: ROOT/<split>/<class>/<image>, classes sorted by name as torchvision does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pinfeed::data {

struct Sample {
  std::string path;
  int64_t label = 0;
};

struct ImageFolder {
  std::string root;                  // ROOT/<split>
  std::vector<std::string> classes;  // sorted; label i names classes[i]
  std::vector<Sample> samples;       // sorted by (class, file name)
};

// Text as a message shows it: control characters escaped as \xNN, so a path or config value holding a newline
// or an escape sequence cannot forge a log line or drive the terminal.
std::string printable(const std::string& text);

// True for .jpg, .jpeg and .png, in any letter case.
bool is_image_file(const std::string& name);

// Scans root/split. Throws DataError naming the path when the root, the split or a class folder is missing
// or empty, or a folder cannot be listed (no permission, a symlink loop, an I/O error). When `classes` is given (a val split scanned after its train split), labels follow it and a
// class folder it does not name is an error.
ImageFolder scan_image_folder(const std::string& root, const std::string& split,
                              const std::vector<std::string>* classes = nullptr);

}  // namespace pinfeed::data
