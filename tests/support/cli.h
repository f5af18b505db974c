#pragma once
// Running the tandem command from tests (the CLI test target defines
// TANDEM_CLI_PATH): its status and output, and the one-line error contract.

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
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

struct MeasuredResult {
  int status;
  std::string errors;      // stderr only
  int64_t peak_rss_bytes;  // the command's peak resident memory (wait4's ru_maxrss)
};

// Runs tandem with the arguments in a child of its own, so that its peak RSS
// is its own and not the largest of every command this test process ran.
inline MeasuredResult run_measured(const std::string& arguments) {
  // One file per test process and call: CTest runs tests in parallel.
  static int calls = 0;
  const std::string errors =
      (std::filesystem::path(TANDEM_TEST_TMPDIR) /
       ("run_measured." + std::to_string(::getpid()) + "." + std::to_string(++calls) + ".stderr"))
          .string();
  const std::string command =
      std::string(TANDEM_CLI_PATH) + " " + arguments + " 2>" + errors + " >/dev/null";
  MeasuredResult r{-1, "", -1};
  const pid_t pid = fork();
  if (pid < 0) return r;
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int raw = 0;
  rusage usage{};
  if (wait4(pid, &raw, 0, &usage) != pid) return r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.peak_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;  // kB on Linux
  std::ifstream in(errors);
  r.errors.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::filesystem::remove(errors);
  return r;
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
