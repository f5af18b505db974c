#pragma once
// Private: plain TCP sockets between tandem's processes, for the links that
// carry no collective traffic of MPI or gloo (the rendezvous store, the
// parameter server's worker links): a listener, a connect that tries several
// addresses, and exact reads with a deadline.

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::comm::detail {

using TcpClock = std::chrono::steady_clock;

// Throws PeerFailed "<what>: <strerror(errno)>".
[[noreturn]] void throw_socket_error(std::string_view what);

// A listening IPv4 socket on every interface (or on `port`, 0 for one the
// kernel chooses). `purpose` names it in errors ("the rendezvous store").
class TcpListener {
 public:
  explicit TcpListener(std::string purpose, int port = 0);
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;
  int port() const { return port_; }
  int fd() const { return fd_; }
  // The next connection (a blocking socket); throws Timeout naming
  // `awaited` after `seconds`.
  int accept(double seconds, std::string_view awaited);
  // Ends accept() calls in other threads (they throw PeerFailed).
  void shut_down();

 private:
  std::string purpose_;
  int fd_ = -1;
  int port_ = 0;
};

// This host's IPv4 addresses, loopback last: where peers may reach a
// listener here.
std::vector<std::string> host_addresses();
// The IPv4 addresses of `host` (a name or a dotted address); throws
// InvalidArgument naming it when it resolves to none.
std::vector<std::string> resolve_host(const std::string& host);
// A blocking socket connected to the first of `addresses` that answers on
// `port`, retried until `seconds` have passed; then throws PeerFailed
// "cannot reach <whom> on port P at <each address and its error>".
int connect_to(const std::vector<std::string>& addresses, int port, double seconds,
               std::string_view whom);
// The address of this end of a connected socket (the interface the peer
// reached this host through).
std::string local_address(int fd);

void set_no_delay(int fd);
// Writes all `n` bytes; throws PeerFailed naming `peer` when it is gone,
// Timeout when `deadline` passes first (a stopped peer that reads nothing).
void send_all(int fd, const void* bytes, size_t n, TcpClock::time_point deadline,
              std::string_view peer);
// Reads exactly `n` bytes. Throws PeerFailed when the peer closes the
// connection, Timeout when `deadline` passes first.
void receive_exactly(int fd, void* out, size_t n, TcpClock::time_point deadline,
                     std::string_view peer);

}  // namespace tandem::comm::detail
