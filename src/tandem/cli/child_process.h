#pragma once
// Starting a child process that cannot outlive its parent: the kernel sends
// it SIGTERM should the parent die (PR_SET_PDEATHSIG), so a parent killed
// outright (an OOM kill, kill -9) leaves nothing running unsupervised.
// Both `tandem launch`'s workers and `tandem tune search`'s trials start
// this way.

#include <sys/types.h>

#include <string>
#include <vector>

namespace tandem::cli {

struct ChildOptions {
  // The child leads a process group of its own, so that a terminal's
  // Ctrl-C reaches the parent alone (which forwards it).
  bool own_process_group = false;
  // When not empty: the child's stdout and stderr, appended to this file.
  std::string output_file;
};

// Starts `command` (its first word looked up on PATH unless it holds a '/')
// with exactly `environment` (NAME=VALUE each) and returns its pid. Throws
// IoError "cannot start <what> as '<command>': <reason>" when it cannot be
// started (no such program, the output file cannot be opened, no fork).
pid_t start_child(const std::string& what, const std::vector<std::string>& command,
                  const std::vector<std::string>& environment, const ChildOptions& options);

}  // namespace tandem::cli
