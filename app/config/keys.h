// The key table (keys.cpp) as the config reader (config.cpp) and the help use it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "app/config/key.h"

namespace pinfeed::app {

inline constexpr const char* kSections[] = {"data", "model", "train", "pipeline", "dist", "run"};

const std::vector<Key>& keys();
const Key* find_key(const std::string& name);  // null: no such key
// Keys that were renamed: old name -> new name, for the "did you mean" of an old config.
const std::map<std::string, std::string>& renamed_keys();
const char* type_name(Type type);

const Names<engine::Precision>& precision_names();
const Names<pipeline::Decoder>& decoder_names();
const Names<Backend>& backend_names();

}  // namespace pinfeed::app
