#pragma once
// Private to the parameter-server engine across processes
// (parameter_server_processes.h): a TCP connection between two of its
// processes (the chief and a worker, the chief and a shard rank, a worker
// and a shard rank), and the encoding of numbers and tensors in its frames.
//
// Why TCP of our own and not MPI messages: Open MPI 4.1 has no fault
// tolerance (no ULFM), so a send to or a receive from a killed rank never
// completes and MPI_Finalize then waits for it; on a socket a killed peer is
// an end of stream at once, and a stopped one is a silence that heartbeats
// bound. MPI only starts the processes and broadcasts the server's address.
//
// A frame is a kind (u32), a length (u64) and that many bytes. Each side
// sends a heartbeat frame every second from a thread of its own, so a peer
// silent for longer than the timeout given to receive() is lost (stopped,
// hung, or cut off) even while the connection stays open.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "tandem/data/element.h"
#include "tandem/tensor/tensor.h"

namespace tandem::distribute::detail {

// What each kind carries: ps_messages.h.
enum class FrameKind : uint32_t {
  hello = 1,
  work = 2,
  gradient = 3,
  heartbeat = 4,
  stop = 5,
  pull = 6,
  values = 7,
  push = 8,
  ack = 9,
  load = 10,
  update = 11,
  squares = 12,
  norm = 13,
  state = 14,
  last = state
};

// Frames longer than this are refused before anything is allocated (the
// largest is a model's parameters plus a batch).
inline constexpr uint64_t kMaxFrameBytes = uint64_t{4} << 30;

class WorkerLink {
 public:
  // How long send() waits for a peer to take its bytes before any receive()
  // has said how long this link's peer may be silent (the engine's default).
  static constexpr double kDefaultSilenceSeconds = 15.0;

  // Takes the connected socket; `peer` names the other side in errors.
  WorkerLink(int fd, std::string peer);
  ~WorkerLink();
  WorkerLink(const WorkerLink&) = delete;
  WorkerLink& operator=(const WorkerLink&) = delete;

  // Sends one frame made of `parts` (thread-safe). Throws PeerFailed when
  // the peer is gone, or takes none of the bytes for as long as the last
  // receive() would wait for its silence (kDefaultSilenceSeconds before any).
  void send(FrameKind kind, const std::vector<std::string_view>& parts);
  // The next frame other than heartbeats. Throws PeerFailed when the peer
  // closed the connection or sent nothing for `silence_seconds`, IoError
  // for a malformed frame.
  std::pair<FrameKind, std::string> receive(double silence_seconds);
  // The next frame's payload, which must be of kind `want` (the answer to
  // a request): IoError naming the peer, the kind it sent and `what` when
  // it is another; otherwise as receive().
  std::string receive(FrameKind want, std::string_view what, double silence_seconds);
  // Starts the heartbeat thread (once).
  void start_heartbeats();
  // Ends the connection (the peer's receive() sees the end); idempotent.
  void close();
  const std::string& peer() const { return peer_; }
  // Whether send() or receive() gave the peer up for its silence (its process may
  // still exist: stopped, hung or cut off), rather than for an end of stream.
  bool peer_silent() const { return silent_.load(); }
  // Renames the peer once it has said who it is (before any other thread
  // uses the link).
  void set_peer(std::string peer) { peer_ = std::move(peer); }

 private:
  void read_exactly(char* out, size_t n, double silence_seconds);

  int fd_;
  std::string peer_;
  std::mutex send_mutex_;
  std::atomic<bool> closing_{false};
  std::atomic<bool> silent_{false};
  std::atomic<double> silence_seconds_{kDefaultSilenceSeconds};
  std::thread heartbeats_;
};

// Little-endian encoding of numbers, strings and tensors in a frame.
class FrameWriter {
 public:
  void u64(uint64_t v);
  void f64(double v);
  void text(std::string_view s);
  // Dtype, rank, dims, then the bytes.
  void tensor(const Tensor& t);
  void element(const data::Element& e);
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// Reads what FrameWriter wrote; throws IoError naming `what` for a frame
// that ends early or holds an impossible dtype, rank or size.
class FrameReader {
 public:
  FrameReader(std::string_view bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}
  uint64_t u64();
  double f64();
  std::string text();
  Tensor tensor();
  // Copies the bytes of a tensor of exactly `into`'s shape and dtype into it.
  void tensor_into(Tensor& into);
  data::Element element();
  bool done() const { return offset_ == bytes_.size(); }

 private:
  std::string_view take(size_t n);
  std::pair<DType, Shape> tensor_header();
  std::string_view bytes_;
  size_t offset_ = 0;
  std::string what_;
};

}  // namespace tandem::distribute::detail
