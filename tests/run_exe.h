// The built pinfeed executable run as a user would run it, for the tests of its command line.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

namespace pinfeed::test {

struct Outcome {
  int code = -1;       // exit code, or -signal
  std::string output;  // stdout (and stderr unless left out)
};

inline std::string quoted(const std::string& arg) {  // one shell word, whatever it holds (newlines included)
  std::string out = "'";
  for (const char ch : arg) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

// `exe args...` in folder `dir` ("" = the current one), stdin empty.
inline Outcome run_exe(const std::string& exe, const std::string& dir, const std::vector<std::string>& args,
                       bool with_stderr = true) {
  std::string command = (dir.empty() ? "" : "cd " + quoted(dir) + " && ") + "exec " + quoted(exe);
  for (const auto& a : args) command += " " + quoted(a);
  command += with_stderr ? " 2>&1 </dev/null" : " 2>/dev/null </dev/null";
  Outcome r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) r.output.append(buffer, n);
  const int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? -WTERMSIG(status) : -1;
  return r;
}

}  // namespace pinfeed::test
