#include "tandem/comm/detail/peer_process.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "tandem/base/host_name.h"

namespace tandem::comm::detail {

PeerProcess this_process() {
  return {host_name(/*fallback=*/"").substr(0, kHostNameBytes - 1), static_cast<int64_t>(getpid())};
}

PeerRecord to_record(const PeerProcess& process) {
  PeerRecord record;
  record.pid = process.pid;
  process.host.copy(record.host, kHostNameBytes - 1);
  return record;
}

PeerProcess from_record(const PeerRecord& record) {
  // The bytes came from another process: never read past the array.
  return {std::string(record.host, strnlen(record.host, kHostNameBytes)), record.pid};
}

std::string process_state(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return "has exited";
  std::stringstream text;
  text << in.rdbuf();
  // "PID (COMMAND) STATE ...": the command may hold spaces and parentheses.
  const std::string stat = text.str();
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return "";
  switch (stat[close + 2]) {
    case 'T':
    case 't':
      return "is stopped (SIGSTOP or a debugger)";
    case 'R':
      return "is running (busy outside the collectives)";
    case 'S':
    case 'D':
    case 'I':
      return "is waiting outside the collectives";
    case 'Z':
    case 'X':
      return "has exited";
    default:
      return "";
  }
}

}  // namespace tandem::comm::detail
