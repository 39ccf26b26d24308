// The config written out from the key table: as TOML (config.toml, checkpoints), as JSON (`pinfeed help config
// --json`) and as the key table's help (`pinfeed help config`, docs/config-keys.md).
#include <map>
#include <sstream>
#include <type_traits>
#include <variant>

#include <toml++/toml.h>

#include "app/config/keys.h"

namespace pinfeed::app {

namespace {

// Every key's value, a table per section, in kSections' order when written.
std::map<std::string, toml::table> section_tables(const Config& c) {
  std::map<std::string, toml::table> sections;
  for (const auto& k : keys()) {
    const auto dot = k.name.find('.');
    auto& t = sections[k.name.substr(0, dot)];
    std::visit([&](const auto& v) { t.insert(k.name.substr(dot + 1), v); }, k.get(c));
  }
  return sections;
}

}  // namespace

std::string to_toml(const Config& c) {
  auto sections = section_tables(c);
  std::ostringstream out;
  for (const char* s : kSections) out << "[" << s << "]\n" << sections[s] << "\n\n";
  return out.str();
}

std::string to_json(const Config& c) {
  auto sections = section_tables(c);
  toml::table all;
  for (const char* s : kSections) all.insert(s, std::move(sections[s]));
  std::ostringstream out;
  out << toml::json_formatter{all} << "\n";
  return out.str();
}

std::vector<KeyHelp> config_keys() {
  const Config defaults;
  std::vector<KeyHelp> out;
  for (const auto& k : keys()) {
    std::ostringstream d;
    std::visit([&](const auto& v) {
      using T = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<T, std::string>) d << '"' << v << '"';
      else if constexpr (std::is_same_v<T, bool>) d << (v ? "true" : "false");
      else d << v;
    }, k.get(defaults));
    out.push_back({k.name, type_name(k.type), d.str(), k.help});
  }
  return out;
}

std::string config_keys_markdown() {
  std::ostringstream out;
  out << "| key | type | default | what it does |\n|---|---|---|---|\n";
  for (const auto& k : config_keys()) {
    std::string help = k.help;
    for (size_t at = 0; (at = help.find('|', at)) != std::string::npos; at += 2) help.replace(at, 1, "\\|");
    out << "| `" << k.name << "` | " << k.type << " | `" << k.default_value << "` | " << help << " |\n";
  }
  return out.str();
}

const char* type_name(Type t) {
  switch (t) {
    case Type::kBool: return "bool";
    case Type::kInt: return "integer";
    case Type::kFloat: return "float";
    case Type::kSwitch: return "bool or \"auto\"";
    default: return "string";
  }
}

}  // namespace pinfeed::app
