#pragma once
// Running the tandem command from tests (the CLI test target defines
// TANDEM_CLI_PATH): its status and output, and the one-line error contract.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace tandem::testing {

struct CommandResult {
  int status;
  std::string output;  // stdout and stderr
};

// Runs a shell command; output holds what it printed.
inline CommandResult shell(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  CommandResult r{-1, ""};
  if (!pipe) return r;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) r.output.append(buffer, n);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

// Runs tandem with the arguments; output holds stdout and stderr, or only
// stderr when errors_only. `environment` ("NAME=value ...") is set for the
// command alone.
inline CommandResult run(const std::string& arguments, bool errors_only = false,
                         const std::string& environment = "") {
  return shell((environment.empty() ? "" : "env " + environment + " ") +
               std::string(TANDEM_CLI_PATH) + " " + arguments +
               (errors_only ? " 2>&1 >/dev/null" : " 2>&1"));
}

// A fresh path under the test directory (removed if it exists).
inline std::string tmp(const std::string& name) {
  const std::filesystem::path p = std::filesystem::path(TANDEM_TEST_TMPDIR) / name;
  std::filesystem::remove_all(p);
  return p.string();
}

inline void expect_one_line_error(const std::string& arguments, const std::string& needle,
                                  const std::string& environment = "") {
  const CommandResult r = run(arguments, true, environment);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("tandem: error:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "not one line: " << r.output;
}

}  // namespace tandem::testing
