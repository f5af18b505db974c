#pragma once
// Which process a rank is, and what a process on this host is doing: for
// the stall report, which can then tell a stopped rank (SIGSTOP, a
// debugger) from one that is busy or waiting outside the collectives.

#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem::comm::detail {

struct PeerProcess {
  std::string host;  // the host name (gethostname; at most kHostNameBytes - 1 bytes)
  int64_t pid = 0;
};

// A PeerProcess as fixed-size bytes, for an all-gather between ranks.
constexpr size_t kHostNameBytes = 120;
struct PeerRecord {
  int64_t pid = 0;
  char host[kHostNameBytes] = {};
};
PeerRecord to_record(const PeerProcess& process);
PeerProcess from_record(const PeerRecord& record);

PeerProcess this_process();

// The state of process `pid` on this host, from /proc/PID/stat: "is
// stopped (SIGSTOP or a debugger)", "is running (busy outside the
// collectives)", "is waiting outside the collectives", "has exited"; empty
// when it cannot be read.
std::string process_state(int64_t pid);

}  // namespace tandem::comm::detail
