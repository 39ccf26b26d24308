// One config key bound to one field of Config: how TOML values are read into it and written back, what values
// are allowed, what it does. The table of every key is app/config/keys.cpp's; this header only makes rows.
#pragma once

#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "app/config/config.h"
#include "app/config/suggest.h"
#include "data/error.h"

namespace pinfeed::app {

using Value = std::variant<bool, int64_t, double, std::string>;
enum class Type { kBool, kInt, kFloat, kString, kSwitch };  // kSwitch: true, false or "auto"

struct Key {
  std::string name;  // "section.key"
  Type type;
  // Checks v and writes it into the field: "" when done, else what is wrong with v ("must be ..., got ...").
  std::function<std::string(Config&, const Value&)> set;
  std::function<Value(const Config&)> get;
  std::string help;
};

// An enum-valued key's names and values, in the order help lists them.
template <class T>
using Names = std::vector<std::pair<std::string, T>>;

template <class T>
std::string name_in(const Names<T>& names, const T& value) {
  for (const auto& [name, v] : names) {
    if (v == value) return name;
  }
  return "?";
}

template <class T>
std::string choices_text(const Names<T>& names) {
  std::string all;
  for (const auto& n : names) {
    if (!n.first.empty()) all += (all.empty() ? "\"" : " | \"") + n.first + "\"";  // "" (none) goes unsaid
  }
  return all;
}

// A field of Config by its path: FIELD(step.optimizer.sgd.momentum).
#define PINFEED_FIELD(path) [](Config& c) -> auto& { return c.path; }

namespace key_detail {

template <class F>
using FieldType = std::decay_t<decltype(std::declval<F>()(std::declval<Config&>()))>;

template <class T>
constexpr Type type_of() {
  if constexpr (std::is_same_v<T, bool>) return Type::kBool;
  else if constexpr (std::is_integral_v<T>) return Type::kInt;
  else if constexpr (std::is_floating_point_v<T>) return Type::kFloat;
  else return Type::kString;
}

// The value as the key's own scalar type: int64_t for every integral field, double for a float one.
template <class T>
using Scalar = std::conditional_t<std::is_same_v<T, bool>, bool,
                                  std::conditional_t<std::is_integral_v<T>, int64_t,
                                                     std::conditional_t<std::is_floating_point_v<T>, double, std::string>>>;

template <class S>
S as(const Value& v) {
  if constexpr (std::is_same_v<S, double>) {
    if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  }
  return std::get<S>(v);
}

}  // namespace key_detail

template <class S>
using Check = std::function<std::string(const S&)>;

// A key whose field is a bool, an integer, a float or a string. `check` sees the value before it is written
// (an integer is checked as int64_t, so a narrower field's range must be in the check).
template <class F>
Key key(const char* name, F field, Check<key_detail::Scalar<key_detail::FieldType<F>>> check, std::string help) {
  using T = key_detail::FieldType<F>;
  using S = key_detail::Scalar<T>;
  Key k{name, key_detail::type_of<T>(), nullptr, nullptr, std::move(help)};
  k.set = [field, check](Config& c, const Value& value) {
    const S v = key_detail::as<S>(value);
    if constexpr (std::is_same_v<S, double>) {
      // TOML reads nan and inf as floats; no range check would catch a NaN (every comparison is false).
      if (!std::isfinite(v)) {
        std::ostringstream s;
        s << "must be a finite number, got " << v;
        return s.str();
      }
    }
    if (check) {
      if (std::string problem = check(v); !problem.empty()) return problem;
    }
    field(c) = static_cast<T>(v);
    return std::string();
  };
  k.get = [field](const Config& c) -> Value { return static_cast<S>(field(const_cast<Config&>(c))); };
  return k;
}

template <class F>
Key key(const char* name, F field, std::string help) {
  return key(name, field, nullptr, std::move(help));
}

// An enum-valued key: a string from `names`, read into its value; nothing downstream compares strings.
template <class F>
Key choice(const char* name, F field, Names<key_detail::FieldType<F>> names, std::string help) {
  Key k{name, Type::kString, nullptr, nullptr, std::move(help)};
  k.set = [field, names](Config& c, const Value& value) {
    const std::string& v = std::get<std::string>(value);
    std::vector<std::string> all;
    for (const auto& [n, x] : names) {
      if (n == v) {
        field(c) = x;
        return std::string();
      }
      all.push_back(n);
    }
    return "must be one of " + choices_text(names) + ", got \"" + data::printable(v) + "\"" + did_you_mean(v, all);
  };
  k.get = [field, names](const Config& c) -> Value { return name_in(names, field(const_cast<Config&>(c))); };
  return k;
}

// A string key parsed into its field's type: `parse` throws std::invalid_argument("must be ..."), `print` is
// its inverse.
template <class F, class Parse, class Print>
Key parsed(const char* name, F field, Parse parse, Print print, std::string help) {
  Key k{name, Type::kString, nullptr, nullptr, std::move(help)};
  k.set = [field, parse](Config& c, const Value& value) {
    try {
      field(c) = parse(std::get<std::string>(value));
      return std::string();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
  };
  k.get = [field, print](const Config& c) -> Value { return print(field(const_cast<Config&>(c))); };
  return k;
}

// A key that takes true, false or "auto" into a std::optional<bool> field (nullopt: "auto", which resolve_plan
// answers for the plan's device).
template <class F>
Key switch_key(const char* name, F field, std::string help) {
  Key k{name, Type::kSwitch, nullptr, nullptr, std::move(help)};
  k.set = [field](Config& c, const Value& value) {
    if (const auto* b = std::get_if<bool>(&value)) {
      field(c) = *b;
      return std::string();
    }
    const std::string& v = std::get<std::string>(value);
    if (v == "auto") {
      field(c) = std::nullopt;
      return std::string();
    }
    return "must be true, false or \"auto\", got \"" + data::printable(v) + "\"" + did_you_mean(v, {"auto"});
  };
  k.get = [field](const Config& c) -> Value {
    const std::optional<bool>& v = field(const_cast<Config&>(c));
    if (v) return *v;
    return std::string("auto");
  };
  return k;
}

// An integer key in MiB whose field holds bytes.
template <class F>
Key mebibytes(const char* name, F field, Check<int64_t> check, std::string help) {
  Key k{name, Type::kInt, nullptr, nullptr, std::move(help)};
  k.set = [field, check](Config& c, const Value& value) {
    const int64_t v = std::get<int64_t>(value);
    if (std::string problem = check(v); !problem.empty()) return problem;
    field(c) = v << 20;
    return std::string();
  };
  k.get = [field](const Config& c) -> Value { return static_cast<int64_t>(field(const_cast<Config&>(c)) >> 20); };
  return k;
}

}  // namespace pinfeed::app
