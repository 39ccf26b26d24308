#include "app/cli/command_line.h"

#include <CLI/CLI.hpp>

#include <algorithm>

#include "app/config/config.h"
#include "app/config/suggest.h"
#include "data/error.h"

namespace pinfeed::app {
namespace {

std::string joined(const std::vector<std::string>& names, const char* separator) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : separator) + n;
  return out;
}

std::vector<std::string> command_names(const CLI::App& cli) {
  std::vector<std::string> names;
  for (const CLI::App* c : cli.get_subcommands({})) names.push_back(c->get_name());
  return names;
}

// The command argv names, or null (none, or not a command).
const CLI::App* command_of(const CLI::App& cli, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return nullptr;
  for (const CLI::App* sub : cli.get_subcommands({})) {
    if (sub->get_name() == argv[1]) return sub;
  }
  return nullptr;
}

// Every long option of `command`, "--name".
std::vector<std::string> long_options(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* o : command.get_options()) {
    for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
  }
  return names;
}

std::string where_listed(const CLI::App* command) {
  return command ? " (pinfeed " + command->get_name() + " --help lists its options)" : " (pinfeed --help)";
}

// A config key spelt as a flag: "--train.epochs", "--epochs", "--batch-size". The key, or "".
std::string key_of_flag(const std::string& flag) {
  std::string name = flag.substr(2);
  std::replace(name.begin(), name.end(), '-', '_');
  for (const auto& k : config_keys()) {
    if (k.name == name || k.name.substr(k.name.find('.') + 1) == name) return k.name;
  }
  return "";
}

}  // namespace

std::string misuse(const CLI::App& cli, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return "";
  const CLI::App* sub = command_of(cli, argc, argv);
  if (!sub) {
    const std::vector<std::string> commands = command_names(cli);
    return "unknown command '" + data::printable(argv[1]) + "'" + did_you_mean(argv[1], commands) + " (commands: " +
           joined(commands, ", ") + ")";
  }
  const std::string command = sub->get_name();
  const bool takes_keys = sub->get_option_no_throw("overrides") != nullptr;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) continue;
    const auto eq = arg.find('=');
    const std::string flag = arg.substr(0, eq);
    if (sub->get_option_no_throw(flag) || flag == "--help") continue;
    const std::string key = takes_keys ? key_of_flag(flag) : "";
    if (!key.empty()) {
      const std::string value = eq != std::string::npos                   ? arg.substr(eq + 1)
                                : i + 1 < argc && argv[i + 1][0] != '-' ? std::string(argv[i + 1])
                                                                          : "VALUE";
      return command + ": unknown option " + data::printable(flag) +
             "; config keys are set as section.key=value: use " + key + "=" + data::printable(value);
    }
    return command + ": unknown option " + data::printable(flag) + did_you_mean(flag, long_options(*sub)) +
           where_listed(sub);
  }
  return "";
}

std::string parse_error_text(const CLI::App& cli, const CLI::ParseError& e, int argc, char** argv) {
  const CLI::App* sub = command_of(cli, argc, argv);
  std::string what = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {  // an unknown short option or an argument too many
    const std::string prefix = what.substr(0, what.find(": ") + 2);
    what = "unexpected argument" + std::string(prefix.find("arguments") != std::string::npos ? "s " : " ") +
           what.substr(prefix.size());
  } else if (dynamic_cast<const CLI::RequiredError*>(&e) && what.find("subcommand") != std::string::npos) {
    what = "a command is required (commands: " + joined(command_names(cli), ", ") + ")";
  }
  return (sub ? sub->get_name() + ": " : std::string()) + data::printable(what) + where_listed(sub);
}

CLI::Validator one_of(const std::vector<std::string>& names) {
  return CLI::Validator(
      [names](std::string& value) -> std::string {
        if (std::find(names.begin(), names.end(), value) != names.end()) return "";
        return "must be " + joined(names, " | ") + ", got '" + data::printable(value) + "'" + did_you_mean(value, names);
      },
      "{" + joined(names, ",") + "}");
}

}  // namespace pinfeed::app
