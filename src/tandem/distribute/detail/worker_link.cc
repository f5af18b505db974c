#include "tandem/distribute/detail/worker_link.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>

#include "tandem/base/error.h"
#include "tandem/comm/detail/tcp.h"

namespace tandem::distribute::detail {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kHeartbeatEvery = std::chrono::seconds(1);
constexpr int kMaxRank = 8;

int milliseconds_left(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1000));
}

}  // namespace

WorkerLink::WorkerLink(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {
  comm::detail::set_no_delay(fd_);
}

WorkerLink::~WorkerLink() {
  close();
  if (heartbeats_.joinable()) heartbeats_.join();
  ::close(fd_);
}

void WorkerLink::close() {
  if (!closing_.exchange(true)) ::shutdown(fd_, SHUT_RDWR);
}

void WorkerLink::start_heartbeats() {
  if (heartbeats_.joinable()) return;
  heartbeats_ = std::thread([this] {
    while (!closing_.load()) {
      const auto next = Clock::now() + kHeartbeatEvery;
      while (!closing_.load() && Clock::now() < next)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (closing_.load()) return;
      try {
        send(FrameKind::heartbeat, {});
      } catch (const Error&) {
        return;  // the receiving side reports the loss
      }
    }
  });
}

void WorkerLink::send(FrameKind kind, const std::vector<std::string_view>& parts) {
  uint64_t length = 0;
  for (std::string_view p : parts) length += p.size();
  char header[12];
  const auto k = static_cast<uint32_t>(kind);
  std::memcpy(header, &k, 4);
  std::memcpy(header + 4, &length, 8);
  std::lock_guard<std::mutex> lock(send_mutex_);
  const double silence = silence_seconds_.load();
  const auto after_silence = [&] {
    return Clock::now() +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(silence));
  };
  // Without waiting in send(): a stopped peer leaves its buffers full and
  // a blocking send of a frame larger than them would never return.
  const auto write_all = [&](std::string_view bytes) {
    auto deadline = after_silence();
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        bytes.remove_prefix(static_cast<size_t>(n));
        deadline = after_silence();  // any progress is a sign of life
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (closing_.load()) TANDEM_THROW(PeerFailed, "connection to ", peer_, " closed here");
        if (Clock::now() >= deadline) {
          silent_.store(true);
          TANDEM_THROW(PeerFailed, peer_, " took nothing sent to it for ", silence,
                       " s (stopped, hung or cut off)");
        }
        pollfd p{fd_, POLLOUT, 0};
        if (::poll(&p, 1, milliseconds_left(deadline)) < 0 && errno != EINTR)
          comm::detail::throw_socket_error("waiting to send to " + peer_);
        continue;
      }
      comm::detail::throw_socket_error("connection to " + peer_ + " lost while sending");
    }
  };
  write_all({header, sizeof header});
  for (std::string_view p : parts) write_all(p);
}

void WorkerLink::read_exactly(char* out, size_t n, double silence_seconds) {
  silence_seconds_.store(silence_seconds);
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(silence_seconds));
  while (n > 0) {
    pollfd p{fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, milliseconds_left(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) comm::detail::throw_socket_error("waiting for " + peer_);
    if (ready == 0) {
      if (closing_.load()) TANDEM_THROW(PeerFailed, "connection to ", peer_, " closed here");
      if (Clock::now() >= deadline) {
        silent_.store(true);
        TANDEM_THROW(PeerFailed, peer_, " sent nothing for ", silence_seconds,
                     " s (stopped, hung or cut off)");
      }
      continue;
    }
    const ssize_t got = ::recv(fd_, out, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) comm::detail::throw_socket_error("connection to " + peer_ + " lost");
    if (got == 0) TANDEM_THROW(PeerFailed, peer_, " closed the connection (the process ended)");
    out += got;
    n -= static_cast<size_t>(got);
    // Any bytes are a sign of life.
    deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(silence_seconds));
  }
}

std::pair<FrameKind, std::string> WorkerLink::receive(double silence_seconds) {
  for (;;) {
    char header[12];
    read_exactly(header, sizeof header, silence_seconds);
    uint32_t kind = 0;
    uint64_t length = 0;
    std::memcpy(&kind, header, 4);
    std::memcpy(&length, header + 4, 8);
    if (kind < static_cast<uint32_t>(FrameKind::hello) ||
        kind > static_cast<uint32_t>(FrameKind::last) || length > kMaxFrameBytes) {
      TANDEM_THROW(IoError, "malformed frame from ", peer_, ": kind ", kind, ", ", length,
                   " bytes (not a tandem parameter-server peer?)");
    }
    // Grown as the bytes arrive, so that a length a peer merely claims
    // allocates nothing.
    std::string payload;
    constexpr uint64_t kChunk = uint64_t{16} << 20;
    while (payload.size() < length) {
      const size_t done = payload.size();
      payload.resize(done + static_cast<size_t>(std::min(kChunk, length - done)));
      read_exactly(payload.data() + done, payload.size() - done, silence_seconds);
    }
    if (static_cast<FrameKind>(kind) == FrameKind::heartbeat) continue;
    return {static_cast<FrameKind>(kind), std::move(payload)};
  }
}

std::string WorkerLink::receive(FrameKind want, std::string_view what, double silence_seconds) {
  auto [kind, payload] = receive(silence_seconds);
  if (kind != want) {
    TANDEM_THROW(IoError, peer_, " sent frame kind ", static_cast<int>(kind), " where ", what,
                 " was expected");
  }
  return std::move(payload);
}

void FrameWriter::u64(uint64_t v) {
  bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void FrameWriter::f64(double v) {
  bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void FrameWriter::text(std::string_view s) {
  u64(s.size());
  bytes_.append(s);
}

void FrameWriter::tensor(const Tensor& t) {
  u64(static_cast<uint64_t>(t.dtype()));
  u64(static_cast<uint64_t>(t.rank()));
  for (int64_t d : t.shape().to_vector()) u64(static_cast<uint64_t>(d));
  bytes_.append(static_cast<const char*>(t.raw_data()), t.nbytes());
}

void FrameWriter::element(const data::Element& e) {
  u64(e.size());
  for (const auto& [name, t] : e.features()) {
    text(name);
    tensor(t);
  }
}

std::string_view FrameReader::take(size_t n) {
  if (n > bytes_.size() - offset_) {
    TANDEM_THROW(IoError, what_, ": the frame ends after ", bytes_.size(), " bytes, ", n,
                 " more needed at byte ", offset_);
  }
  const std::string_view out = bytes_.substr(offset_, n);
  offset_ += n;
  return out;
}

uint64_t FrameReader::u64() {
  uint64_t v = 0;
  std::memcpy(&v, take(sizeof v).data(), sizeof v);
  return v;
}

double FrameReader::f64() {
  double v = 0;
  std::memcpy(&v, take(sizeof v).data(), sizeof v);
  return v;
}

std::string FrameReader::text() {
  const uint64_t n = u64();
  return std::string(take(n));
}

std::pair<DType, Shape> FrameReader::tensor_header() {
  const uint64_t dtype = u64(), rank = u64();
  if (!is_dtype_code(dtype) || rank > kMaxRank)
    TANDEM_THROW(IoError, what_, ": a tensor of dtype code ", dtype, " and rank ", rank);
  std::vector<int64_t> dims;
  uint64_t elements = 1;
  for (uint64_t i = 0; i < rank; ++i) {
    const uint64_t d = u64();
    if (d > kMaxFrameBytes || (d > 0 && elements > kMaxFrameBytes / d))
      TANDEM_THROW(IoError, what_, ": a tensor dimension of ", d);
    elements *= d;
    dims.push_back(static_cast<int64_t>(d));
  }
  return {static_cast<DType>(dtype), Shape(dims)};
}

Tensor FrameReader::tensor() {
  const auto [dtype, shape] = tensor_header();
  const size_t n = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  const std::string_view bytes = take(n);  // checked before the allocation
  Tensor t = Tensor::empty(shape, dtype);
  std::memcpy(t.raw_data(), bytes.data(), n);
  return t;
}

void FrameReader::tensor_into(Tensor& into) {
  const auto [dtype, shape] = tensor_header();
  if (dtype != into.dtype() || shape != into.shape()) {
    TANDEM_THROW(IoError, what_, ": a tensor ", dtype_name(dtype), " ", shape.to_string(),
                 " where ", dtype_name(into.dtype()), " ", into.shape().to_string(),
                 " was expected (do the processes build the same model?)");
  }
  const std::string_view bytes = take(into.nbytes());
  std::memcpy(into.raw_data(), bytes.data(), bytes.size());
}

data::Element FrameReader::element() {
  const uint64_t features = u64();
  if (features > 1024) TANDEM_THROW(IoError, what_, ": an element of ", features, " features");
  data::Element e;
  for (uint64_t i = 0; i < features; ++i) {
    std::string name = text();
    e.set(name, tensor());
  }
  return e;
}

}  // namespace tandem::distribute::detail
