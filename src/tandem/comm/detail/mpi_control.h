#pragma once
// Private to the MPI backend (TANDEM_HAVE_MPI builds only): the MPI
// communicator's control channel, on its own duplicate of the world
// communicator, for what ranks tell each other outside the collectives: a
// failing rank's reason (which breaks every rank's communicator), the
// heartbeat that finds a silent peer, and the stall report's question
// ("which call are you in?") and its answers. It counts the collectives its
// rank started and finished, which the answers and an abort carry. A
// responder thread answers peers while the rank computes.

#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tandem/comm/communicator.h"
#include "tandem/comm/detail/peer_process.h"

namespace tandem::comm::detail {

class MpiControl {
 public:
  // A wait longer than this looks for a silent peer (silent_peer()).
  static constexpr std::chrono::milliseconds kHeartbeat{1000};

  // Collective over MPI_COMM_WORLD: duplicates it and all-gathers every
  // rank's host and process id (for the reports).
  explicit MpiControl(std::chrono::milliseconds peer_timeout);
  // Stops the responder thread and frees the channel; returns whether it
  // was broken, in which case requests may still be pending and their
  // memory is left to MPI (the caller's communicator too should be left).
  bool close();
  ~MpiControl();
  MpiControl(const MpiControl&) = delete;
  MpiControl& operator=(const MpiControl&) = delete;

  void call_started() { ++calls_; }
  void call_finished() { ++finished_; }
  // Whether the running call must be given up: a peer failed before it
  // finished this call (a call every failed rank completed must complete
  // here too: the notice can overtake that call's last messages), or this
  // rank broke the channel.
  bool must_refuse() const { return broken_.load() && calls_.load() > peer_finished_.load(); }
  [[noreturn]] void refuse(const Call& call);

  // Handles what arrived: an abort breaks the channel; a question is
  // answered with this rank's call counts.
  void poll();
  // Breaks the channel, sends the reason to every peer and waits (bounded)
  // for the notices to leave.
  void abort(const std::string& reason);
  // Keeps memory that a pending request may still write as long as the channel.
  void quarantine(std::shared_ptr<const void> memory);

  // Asks each peer not asked since its last answer whether it is there (at
  // most once per heartbeat); returns a peer that has not answered for the
  // peer wait, or -1.
  int silent_peer();
  // Ends every rank's call with a report on the silent peer, or on which
  // call each rank waits in (after `timeout`).
  [[noreturn]] void unreachable(const Call& call, const char* what, int peer);
  [[noreturn]] void stall(const Call& call, const char* what, std::chrono::milliseconds timeout);

 private:
  enum NoticeTag : int { kAbortTag = 1, kPingTag = 2, kPongTag = 3 };
  static constexpr int kNoticeBytes = 2048;
  using Clock = std::chrono::steady_clock;
  static constexpr Clock::time_point kAnswered = Clock::time_point::max();

  // Each takes (or needs) mutex_ as it says.
  void post_receive();                                             // mutex_ held
  void send(int to, NoticeTag tag, const void* bytes, int count);  // mutex_ held
  void break_channel(const std::string& reason);
  void flush(std::chrono::milliseconds limit);
  // "rank R (pid P on host H)".
  std::string describe_rank(int rank) const;
  // The stall report's lists of silent ranks and of ranks in another call.
  std::string stall_findings();
  // Ends every rank's call with `report` (the job cannot finalise).
  template <class E>
  [[noreturn]] void end_job(const std::string& report);

  MPI_Comm channel_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<PeerProcess> peers_;  // by rank
  std::chrono::milliseconds peer_wait_;
  // Collectives started on this rank (the same on every rank) and completed.
  std::atomic<int64_t> calls_{0};
  std::atomic<int64_t> finished_{0};
  // The fewest collectives any failed rank completed (-1: this rank broke the channel).
  std::atomic<int64_t> peer_finished_{std::numeric_limits<int64_t>::max()};
  std::atomic<bool> broken_{false};

  mutable std::mutex mutex_;
  MPI_Request receive_ = MPI_REQUEST_NULL;
  // On the heap: a broken channel leaves its receive posted (see close()),
  // and MPI may still write a late notice here.
  std::shared_ptr<std::array<char, kNoticeBytes> > notice_ =
      std::make_shared<std::array<char, kNoticeBytes> >();
  std::vector<MPI_Request> sends_;
  std::vector<std::shared_ptr<std::vector<char> > > send_buffers_;  // until their sends complete
  std::string reason_;
  std::vector<std::shared_ptr<const void> > quarantined_;
  // Stall report answers: rank -> the calls it had started and finished
  // when it answered (-1: no answer).
  std::vector<std::array<int64_t, 2> > pongs_;
  // By rank: when this rank first asked it after its last answer.
  std::vector<Clock::time_point> unanswered_since_;
  Clock::time_point last_heartbeat_;

  std::thread responder_;
  std::atomic<bool> stopping_{false};
  bool closed_ = false;
};

}  // namespace tandem::comm::detail
