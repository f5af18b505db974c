#include "tandem/comm/detail/tcp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "tandem/base/error.h"

namespace tandem::comm::detail {
namespace {

int milliseconds_until(TcpClock::time_point deadline, int most) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - TcpClock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, most));
}

}  // namespace

void throw_socket_error(std::string_view what) {
  TANDEM_THROW(PeerFailed, what, ": ", std::strerror(errno));
}

TcpListener::TcpListener(std::string purpose, int port) : purpose_(std::move(purpose)) {
  if (port < 0 || port > 65535)
    TANDEM_THROW(InvalidArgument, "port ", port, " for ", purpose_, " is outside 0..65535");
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw_socket_error("cannot open a socket for " + purpose_);
  const int one = 1;
  ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t size = sizeof address;
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(fd_, 64) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    const int error = errno;
    ::close(fd_);
    errno = error;
    throw_socket_error("cannot listen for " + purpose_ +
                       (port != 0 ? " on port " + std::to_string(port) : std::string()));
  }
  port_ = ntohs(address.sin_port);
}

TcpListener::~TcpListener() {
  if (fd_ >= 0) ::close(fd_);
}

void TcpListener::shut_down() {
  ::shutdown(fd_, SHUT_RDWR);
}

int TcpListener::accept(double seconds, std::string_view awaited) {
  pollfd p{fd_, POLLIN, 0};
  const int ready = ::poll(&p, 1, static_cast<int>(seconds * 1000.0));
  if (ready <= 0) {
    TANDEM_THROW(Timeout, "no ", awaited, " connected within ", seconds, " s (port ", port_,
                 "; a firewall between the hosts?)");
  }
  const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) throw_socket_error("accepting " + std::string(awaited));
  return fd;
}

std::vector<std::string> host_addresses() {
  std::vector<std::string> addresses;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
      if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
      char text[INET_ADDRSTRLEN];
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) addresses.emplace_back(text);
    }
    ::freeifaddrs(list);
  }
  addresses.emplace_back("127.0.0.1");
  return addresses;
}

std::vector<std::string> resolve_host(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0) {
    TANDEM_THROW(InvalidArgument, "cannot resolve host '", host, "': ", ::gai_strerror(rc));
  }
  std::vector<std::string> addresses;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET_ADDRSTRLEN];
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) &&
        std::find(addresses.begin(), addresses.end(), text) == addresses.end()) {
      addresses.emplace_back(text);
    }
  }
  ::freeaddrinfo(found);
  if (addresses.empty()) TANDEM_THROW(InvalidArgument, "host '", host, "' has no IPv4 address");
  return addresses;
}

int connect_to(const std::vector<std::string>& addresses, int port, double seconds,
               std::string_view whom) {
  const auto deadline = TcpClock::now() + std::chrono::duration_cast<TcpClock::duration>(
                                              std::chrono::duration<double>(seconds));
  std::string tried;
  do {
    tried.clear();
    for (const std::string& text : addresses) {
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(static_cast<uint16_t>(port));
      if (::inet_pton(AF_INET, text.c_str(), &address.sin_addr) != 1) continue;
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) throw_socket_error("cannot open a socket");
      int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        int error = ETIMEDOUT;
        if (::poll(&p, 1, std::max(1, milliseconds_until(deadline, 2000))) == 1) {
          socklen_t size = sizeof error;
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size);
        }
        rc = error == 0 ? 0 : -1;
        errno = error;
      }
      if (rc == 0) {
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        set_no_delay(fd);
        return fd;
      }
      tried += (tried.empty() ? "" : ", ") + text + " (" + std::strerror(errno) + ")";
      ::close(fd);
    }
    if (TcpClock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (TcpClock::now() < deadline);
  TANDEM_THROW(PeerFailed, "cannot reach ", whom, " on port ", port, " within ", seconds,
               " s (tried ", tried, ")");
}

std::string local_address(int fd) {
  sockaddr_in address{};
  socklen_t size = sizeof address;
  char text[INET_ADDRSTRLEN] = "127.0.0.1";
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0 &&
      address.sin_family == AF_INET) {
    ::inet_ntop(AF_INET, &address.sin_addr, text, sizeof text);
  }
  return text;
}

void set_no_delay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void send_all(int fd, const void* bytes, size_t n, TcpClock::time_point deadline,
              std::string_view peer) {
  const char* p = static_cast<const char*>(bytes);
  while (n > 0) {
    const ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (TcpClock::now() >= deadline) TANDEM_THROW(Timeout, peer, " took nothing in time");
      pollfd poll_fd{fd, POLLOUT, 0};
      if (::poll(&poll_fd, 1, milliseconds_until(deadline, 1000)) < 0 && errno != EINTR)
        throw_socket_error("waiting to send to " + std::string(peer));
      continue;
    }
    if (sent < 0) throw_socket_error("connection to " + std::string(peer) + " lost");
    p += sent;
    n -= static_cast<size_t>(sent);
  }
}

void receive_exactly(int fd, void* out, size_t n, TcpClock::time_point deadline,
                     std::string_view peer) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    pollfd poll_fd{fd, POLLIN, 0};
    const int ready = ::poll(&poll_fd, 1, milliseconds_until(deadline, 1000));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) throw_socket_error("waiting for " + std::string(peer));
    if (ready == 0) {
      if (TcpClock::now() >= deadline) TANDEM_THROW(Timeout, peer, " did not answer in time");
      continue;
    }
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw_socket_error("connection to " + std::string(peer) + " lost");
    if (got == 0) TANDEM_THROW(PeerFailed, peer, " closed the connection");
    p += got;
    n -= static_cast<size_t>(got);
  }
}

}  // namespace tandem::comm::detail
