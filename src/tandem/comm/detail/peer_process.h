#pragma once
// Which process a rank is, and what a process on this host is doing: for
// the stall report, which can then tell a stopped rank (SIGSTOP, a
// debugger) from one that is busy or waiting outside the collectives.

#include <cstdint>
#include <string>

namespace tandem::comm::detail {

struct PeerProcess {
  uint64_t host = 0;  // a hash of the host name
  int64_t pid = 0;
};

PeerProcess this_process();

// The state of process `pid` on this host, from /proc/PID/stat: "is
// stopped (SIGSTOP or a debugger)", "is running (busy outside the
// collectives)", "is waiting outside the collectives", "has exited"; empty
// when it cannot be read.
std::string process_state(int64_t pid);

}  // namespace tandem::comm::detail
