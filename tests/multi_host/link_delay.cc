// link-delay: the test hosts' propagation delay (scripts/netns-hosts.sh
// delay). This kernel has no netem, so tc can limit a link's rate but not
// delay it; this program joins two network interfaces and forwards every
// frame from one to the other DELAY later, in both directions, like a long
// cable. It reads and writes whole frames through AF_PACKET sockets with a
// virtio-net header, so that the large segments of TCP segmentation offload
// cross intact (the kernel splits them on the far side) and checksums left
// to the hardware stay left to it.
//
// usage: link-delay IF_A IF_B DELAY_US [QUEUE_BYTES]
//   QUEUE_BYTES (default 64 MiB) bounds the frames in flight each way; a
//   frame that would exceed it is dropped, as a router's full queue drops.
// Runs until SIGTERM or SIGINT. Needs CAP_NET_RAW.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t stop_requested = 0;

void request_stop(int) {
  stop_requested = 1;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "link-delay: %s\n", what.c_str());
  std::exit(1);
}

[[noreturn]] void die_errno(const std::string& what) {
  die(what + ": " + std::strerror(errno));
}

// One end: a raw socket bound to an interface, reading only the frames that
// arrive on it (not the ones this program sends out of it).
int open_end(const char* interface) {
  const unsigned index = if_nametoindex(interface);
  if (index == 0) die_errno(std::string("no interface '") + interface + "'");
  const int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  if (fd < 0) die_errno("socket(AF_PACKET) (needs CAP_NET_RAW)");
  const int on = 1;
  if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &on, sizeof on) != 0)
    die_errno("PACKET_VNET_HDR");
  if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &on, sizeof on) != 0)
    die_errno("PACKET_IGNORE_OUTGOING");
  const int buffer = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof buffer);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buffer, sizeof buffer);
  sockaddr_ll address{};
  address.sll_family = AF_PACKET;
  address.sll_protocol = htons(ETH_P_ALL);
  address.sll_ifindex = static_cast<int>(index);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
    die_errno(std::string("bind to '") + interface + "'");
  return fd;
}

struct Frame {
  Clock::time_point due;
  std::vector<char> bytes;  // virtio-net header, then the Ethernet frame
};

// struct virtio_net_hdr (linux/virtio_net.h, which C++ cannot include: a
// member there is named `class`): flags, GSO type, and four 16-bit fields.
constexpr size_t kVirtioNetHeaderBytes = 10;
// The largest frame: a 64 KiB offloaded segment, its Ethernet header and
// the virtio-net header.
constexpr size_t kMaxFrame = 65536 + 64 + kVirtioNetHeaderBytes;

// Frames read from one end, waiting to be written to the other.
struct Direction {
  int from = -1, to = -1;
  std::deque<Frame> queue;
  size_t queued_bytes = 0;
  uint64_t dropped = 0;
  std::vector<char> buffer = std::vector<char>(kMaxFrame);  // each read lands here first
};

void receive(Direction& d, std::chrono::microseconds delay, size_t limit) {
  std::vector<char>& buffer = d.buffer;
  for (;;) {
    const ssize_t n = recv(d.from, buffer.data(), buffer.size(), MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      if (errno == ENETDOWN) return;  // the link is cut; frames stop, the program stays
      die_errno("recv");
    }
    if (static_cast<size_t>(n) > buffer.size()) {  // truncated: cannot be forwarded whole
      ++d.dropped;
      continue;
    }
    if (d.queued_bytes + static_cast<size_t>(n) > limit) {
      ++d.dropped;
      continue;
    }
    d.queue.push_back(
        {Clock::now() + delay, std::vector<char>(buffer.begin(), buffer.begin() + n)});
    d.queued_bytes += static_cast<size_t>(n);
  }
}

void transmit_due(Direction& d) {
  const auto now = Clock::now();
  while (!d.queue.empty() && d.queue.front().due <= now) {
    const std::vector<char>& bytes = d.queue.front().bytes;
    if (send(d.to, bytes.data(), bytes.size(), 0) < 0) {
      if (errno == EINTR) return;  // retried on the next round
      // ENOBUFS: the far device's queue (a rate limit's) was full; ENETDOWN,
      // ENXIO: its link is cut. The frame is lost, as on a wire.
      if (errno != ENOBUFS && errno != ENETDOWN && errno != ENXIO) die_errno("send");
      ++d.dropped;
    }
    d.queued_bytes -= bytes.size();
    d.queue.pop_front();
  }
}

long parse_whole_number(const char* text, const char* what, long max) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 0 || value > max)
    die(std::string(what) + " must be a whole number from 0 to " + std::to_string(max) + ", got '" +
        text + "'");
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5) {
    std::fprintf(stderr, "usage: %s IF_A IF_B DELAY_US [QUEUE_BYTES]\n", argv[0]);
    return 2;
  }
  const std::chrono::microseconds delay(parse_whole_number(argv[3], "DELAY_US", 10'000'000));
  const auto limit = static_cast<size_t>(
      argc == 5 ? parse_whole_number(argv[4], "QUEUE_BYTES", 1L << 32) : 64L << 20);
  if (limit < kMaxFrame)
    die("QUEUE_BYTES must hold at least one frame (" + std::to_string(kMaxFrame) + " bytes)");
  std::signal(SIGTERM, request_stop);
  std::signal(SIGINT, request_stop);
  const int a = open_end(argv[1]), b = open_end(argv[2]);
  Direction forward{.from = a, .to = b}, backward{.from = b, .to = a};
  while (!stop_requested) {
    // Sleep until a frame arrives or the earliest queued one is due.
    timespec timeout{1, 0};
    for (const Direction* d : {&forward, &backward}) {
      if (d->queue.empty()) continue;
      const auto wait = std::max(Clock::duration::zero(), d->queue.front().due - Clock::now());
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
      const int64_t current = int64_t{timeout.tv_sec} * 1'000'000'000 + timeout.tv_nsec;
      if (ns < current) timeout = {static_cast<time_t>(ns / 1'000'000'000), ns % 1'000'000'000};
    }
    pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    if (ppoll(fds, 2, &timeout, nullptr) < 0 && errno != EINTR) die_errno("ppoll");
    if (fds[0].revents & POLLIN) receive(forward, delay, limit);
    if (fds[1].revents & POLLIN) receive(backward, delay, limit);
    transmit_due(forward);
    transmit_due(backward);
  }
  std::fprintf(stderr, "link-delay: %s <-> %s stopped; frames dropped: %llu and %llu\n", argv[1],
               argv[2], static_cast<unsigned long long>(forward.dropped),
               static_cast<unsigned long long>(backward.dropped));
  return 0;
}
