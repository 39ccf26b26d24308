// pinfeed's command line speaking as its config does: CLI11's own errors get the "error:" line, the command and
// the nearest name ("did you mean"), and a config key typed as a flag gets the override to write instead.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
class ParseError;
class Validator;
}  // namespace CLI

namespace pinfeed::app {

// What CLI11 would say later or only as "not expected", said before it parses, with the likely intent: an
// unknown command or option named with the nearest one; a config key typed as a flag (--epochs 1 as torchvision's
// scripts take it, or --train.epochs=1) with the override to write. Returns the message, or "" to let CLI11 parse.
std::string misuse(const CLI::App& cli, int argc, char** argv);

// A CLI11 parse error (not --help's or --version's) as one message: "<command>: <what>", an unknown option's
// nearest one, and where the options are listed.
std::string parse_error_text(const CLI::App& cli, const CLI::ParseError& error, int argc, char** argv);

// An option that takes one of `names`: its help shows them as {a,b}; another value is refused with the nearest.
CLI::Validator one_of(const std::vector<std::string>& names);

}  // namespace pinfeed::app
