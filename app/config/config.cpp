// The config reader: TOML text and "section.key=value" overrides into Config through the key table
// (keys.cpp), errors at file:line:col, then the checks that span several keys.
#include "app/config/config.h"

#include <algorithm>
#include <sstream>

#include <toml++/toml.h>

#include "app/config/keys.h"

namespace pinfeed::app {
namespace {

using data::printable;

constexpr const char* kOverride = "override '";  // how an override's location starts: override 'k=v':1:N

// "unknown key 'x'" with the key most likely meant: the same key name in its right section (epochs, data.lr),
// else the nearest key by edit distance (train.learning_rte).
std::string unknown_key(const std::string& name) {
  const auto dot = name.find('.');
  const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
  std::vector<std::string> names;
  std::string same_leaf;
  for (const auto& k : keys()) {
    names.push_back(k.name);
    if (k.name.substr(k.name.find('.') + 1) == leaf) same_leaf = k.name;
  }
  const auto renamed = renamed_keys().find(name);
  const std::string hint = renamed != renamed_keys().end() ? " (renamed); did you mean '" + renamed->second + "'?"
                           : !same_leaf.empty()             ? "; did you mean '" + same_leaf + "'?"
                                                            : did_you_mean(name, names);
  return "unknown key '" + printable(name) + "'" + hint + " (pinfeed help config lists every key)";
}

std::string where(const std::string& source, const toml::source_region& r) {
  return source + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
}

// The node's value as the key's type, or an error message.
bool read_value(const toml::node& node, Type type, Value* out) {
  switch (type) {
    case Type::kBool:
      if (auto v = node.value_exact<bool>()) { *out = *v; return true; }
      return false;
    case Type::kInt:
      if (auto v = node.value_exact<int64_t>()) { *out = *v; return true; }
      return false;
    case Type::kFloat:
      if (node.is_integer()) { *out = static_cast<double>(*node.value_exact<int64_t>()); return true; }
      if (auto v = node.value_exact<double>()) { *out = *v; return true; }
      return false;
    case Type::kSwitch:  // true, false, or a string the key checks ("auto")
      if (auto v = node.value_exact<bool>()) { *out = *v; return true; }
      if (auto v = node.value_exact<std::string>()) { *out = *v; return true; }
      return false;
    default:
      if (auto v = node.value_exact<std::string>()) { *out = *v; return true; }
      return false;
  }
}

const char* node_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "bool";
    default: return "date/time";
  }
}

// What a key of this type takes, as the error says it.
const char* expected_value(Type t) {
  switch (t) {
    case Type::kBool: return "true or false";
    case Type::kInt: return "an integer";
    case Type::kFloat: return "a number";
    case Type::kSwitch: return "true, false or \"auto\"";
    default: return "a string";
  }
}

// A TOML value as an error quotes it: strings in quotes, escaped; tables and arrays by kind.
std::string shown_value(const toml::node& n) {
  if (const auto* s = n.as_string()) return "\"" + printable(s->get()) + "\"";
  if (n.is_table()) return "a table";
  if (n.is_array()) return "an array";
  std::ostringstream out;
  if (n.is_integer()) out << n.as_integer()->get();
  else if (n.is_floating_point()) out << n.as_floating_point()->get();
  else if (n.is_boolean()) out << (n.as_boolean()->get() ? "true" : "false");
  else return std::string("a ") + node_type_name(n);
  return out.str();
}

// `as_typed`: the value as the user wrote it, quoted in a type error ("" = show the TOML value).
void set_key(Config& c, const Key& k, const toml::node& node, const std::string& location,
             const std::string& as_typed = "") {
  Value v;
  if (!read_value(node, k.type, &v)) {
    throw ConfigError(location + ": " + k.name + ": expected " + expected_value(k.type) + ", got " +
                      (as_typed.empty() ? shown_value(node) : "'" + printable(as_typed) + "'"));
  }
  if (auto problem = k.set(c, v); !problem.empty()) throw ConfigError(location + ": " + k.name + " " + problem);
  c.locations[k.name] = location;
}

void apply_table(Config& c, const toml::table& root, const std::string& source) {
  for (auto&& [section, node] : root) {
    const std::string sname(section.str());
    const auto* table = node.as_table();
    if (!table) {
      throw ConfigError(where(source, section.source()) + ": '" + printable(sname) +
                        "' must be a section: [data] [model] [train] [pipeline] [dist] [run]");
    }
    const std::vector<std::string> sections(std::begin(kSections), std::end(kSections));
    if (std::find(sections.begin(), sections.end(), sname) == sections.end()) {
      // At the section's header, where the typo is (the table's own region starts there too).
      throw ConfigError(where(source, table->source()) + ": unknown section [" + printable(sname) + "]" +
                        did_you_mean(sname, sections) + " (pinfeed help config lists every key)");
    }
    for (auto&& [name, value] : *table) {
      const std::string full = sname + "." + std::string(name.str());
      const Key* k = find_key(full);
      if (!k) throw ConfigError(where(source, name.source()) + ": " + unknown_key(full));
      set_key(c, *k, value, where(source, value.source()));
    }
  }
}

toml::table parse_toml(const std::string& text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw ConfigError(where(source, e.source()) + ": " + std::string(e.description()));
  }
}


// pipeline.mode's preset sets the three flags, once, here; an explicit flag must agree with it.
void apply_mode(Config& c) {
  if (!c.pipeline.mode) return;
  const auto& preset = pipeline::preset_of(*c.pipeline.mode);
  const std::pair<const char*, bool> flags[] = {
      {"pipeline.pin_memory", c.pipeline.pin_memory == preset.pin_memory},
      {"pipeline.non_blocking", c.pipeline.non_blocking == preset.non_blocking},
      {"pipeline.dual_stream", c.pipeline.dual_stream == preset.dual_stream},
  };
  for (const auto& [name, agrees] : flags) {
    if (c.locations.count(name) && !agrees) {
      throw ConfigError(location_of(c, name) + ": " + name + " contradicts pipeline.mode = \"" + preset.name +
                        "\" (set at " + location_of(c, "pipeline.mode") + "); set one or the other");
    }
  }
  pipeline::apply_preset(preset, c.pipeline);
}

// "train.epochs = 3 (set at cfg.toml:5:10)", or "(its default)": a second key that a cross-key error names beside
// the one it is located at.
std::string also_at(const Config& c, const std::string& key) {
  const std::string where = c.locations.count(key) ? "set at " + location_of(c, key) : "its default";
  return key + " = " + value_text(c, key) + " (" + where + ")";
}

// The learning-rate schedule's keys together: a warm-up past the run, or a floor above the peak, would quietly
// give another shape than the one named. A warm-up as long as the run passes for cosine and poly (it warms up
// throughout and ends at train.lr: a recipe shortened to probe it, quickstart's 1 epoch with train.epochs=1).
// Each error is located at the warm-up or the floor and names the other key with where it was set.
void check_lr_schedule(const Config& c) {
  const engine::LrSchedule& s = c.schedule;
  const std::string epochs = also_at(c, "train.epochs");
  const std::string warmup = "train.warmup_epochs = " + value_text(c, "train.warmup_epochs");
  const std::string shape = "train.lr_schedule = " + value_text(c, "train.lr_schedule");
  if (s.shape == engine::LrShape::kTriangular && !(s.warmup_epochs < static_cast<double>(s.epochs))) {
    throw ConfigError(location_of(c, "train.warmup_epochs") + ": " + warmup + " is not before " + epochs + ": " +
                      shape + " peaks at epoch train.warmup_epochs, which must come before the end; lower "
                      "train.warmup_epochs or raise train.epochs");
  }
  if (s.warmup_epochs > static_cast<double>(s.epochs)) {
    throw ConfigError(location_of(c, "train.warmup_epochs") + ": " + warmup + " is past " + epochs + ": " + shape +
                      " would end inside its warm-up, below train.lr; lower train.warmup_epochs (to train.epochs "
                      "at most) or raise train.epochs");
  }
  if (s.min_lr > s.lr) {
    throw ConfigError(location_of(c, "train.min_lr") + ": train.min_lr = " + value_text(c, "train.min_lr") +
                      " is above " + also_at(c, "train.lr") + ": the rate would rise after its peak; set train.min_lr "
                      "to train.lr at most");
  }
}

// The key a data.image_size schedule's problem (SideSchedule::problem) is located at: one the user set. The list
// when it is set (alone, or beside a ramp); a ramp's side that was given without the other; the smallest side
// over the largest; else the ramp's start after its end.
std::string side_schedule_key(const Config& c) {
  const data::SideSchedule& s = c.transform.schedule;
  if (!s.by_epoch.empty()) return "data.image_size_by_epoch";
  if ((s.min > 0) != (s.max > 0)) return s.min > 0 ? "data.image_size_min" : "data.image_size_max";
  if (s.min > s.max) return "data.image_size_min";
  return c.locations.count("data.ramp_start") ? "data.ramp_start" : "data.ramp_end";
}

// The checks that span several keys and need no device (resolve_plan has the others).
void check_config(const Config& c) {
  if (c.dataset.root.empty()) {
    throw ConfigError(c.source + ":1:1: data.root is not set: point it at an ImageFolder "
                      "(or make one with pinfeed gen-data) in [data] or as data.root=PATH");
  }
  if (c.transform.scale_min > c.transform.scale_max) {
    throw ConfigError(location_of(c, "data.scale_min") + ": data.scale_min must not exceed data.scale_max");
  }
  check_lr_schedule(c);
  if (const std::string problem = c.transform.schedule.problem(); !problem.empty()) {
    const std::string key = side_schedule_key(c);
    throw ConfigError(location_of(c, key) + ": " + key + " (the data.image_size schedule): " + problem);
  }
  // The transfer flags' combination now; what the device allows once it is resolved (resolve_plan).
  if (const auto problem = pipeline::check_options(c.pipeline, /*device_is_cuda=*/true)) {
    throw ConfigError(location_of(c, c.pipeline.mode ? "pipeline.mode" : problem.key) + ": " + problem.message);
  }
}

}  // namespace

std::string location_of(const Config& c, const std::string& key) {
  auto it = c.locations.find(key);
  return it != c.locations.end() ? it->second : c.source + ":1:1";
}

bool set_by_override(const Config& c, const std::string& key) {
  const auto it = c.locations.find(key);
  return it != c.locations.end() && it->second.rfind(kOverride, 0) == 0;
}

std::string value_text(const Config& c, const std::string& key) {
  const Key* k = find_key(key);
  if (!k) return "?";
  std::ostringstream out;
  std::visit([&](const auto& v) {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, std::string>) out << '"' << printable(v) << '"';
    else if constexpr (std::is_same_v<T, bool>) out << (v ? "true" : "false");
    else out << v;
  }, k->get(c));
  return out.str();
}

void apply_override(Config& c, const std::string& assignment) {
  const std::string source = kOverride + printable(assignment) + "'";
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError(source + ":1:1: expected section.key=value");
  }
  const std::string name = assignment.substr(0, eq);
  const Key* k = find_key(name);
  if (!k) throw ConfigError(source + ":1:1: " + unknown_key(name));
  const std::string value = assignment.substr(eq + 1);
  const std::string location = source + ":1:" + std::to_string(eq + 2);
  toml::table doc;
  try {
    doc = toml::parse("v = " + value, source);
  } catch (const toml::parse_error& e) {
    // Not a TOML value: toml++'s own words ("could not determine value type") would not say which key or type.
    // A string key, or a switch's "auto", takes a bare word.
    if (k->type != Type::kString && k->type != Type::kSwitch) {
      throw ConfigError(location + ": " + k->name + ": expected " + expected_value(k->type) + ", got '" +
                        printable(value) + "'");
    }
    doc.insert("v", value);  // a bare word for a string key
  }
  // A string key takes a bare word as written even where TOML reads another type: run.name=true is the name
  // "true", data.root=nan the folder "nan".
  if (k->type == Type::kString && !doc.get("v")->is_string()) doc.insert_or_assign("v", value);
  set_key(c, *k, *doc.get("v"), location, value);
}

Config parse_config_string(const std::string& text, const std::string& source,
                           const std::vector<std::string>& overrides) {
  Config c;
  c.source = source;
  apply_table(c, parse_toml(text, source), source);
  for (const auto& o : overrides) apply_override(c, o);
  apply_mode(c);
  check_config(c);
  return c;
}

}  // namespace pinfeed::app
