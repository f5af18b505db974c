// The MPI communicator (mpi.h); MPI's process-wide state is in
// detail/mpi_runtime, the job-level calls in mpi_job.cc.
#include "tandem/comm/mpi.h"

#include <climits>
#include <limits>

#include "tandem/base/error.h"
#include "tandem/config.h"

#if TANDEM_HAVE_MPI
#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "tandem/comm/detail/mpi_runtime.h"
#include "tandem/comm/detail/peer_process.h"
#include "tandem/comm/detail/reduce_kernels.h"
#endif

namespace tandem::comm {

bool mpi_built() {
  return TANDEM_HAVE_MPI == 1;
}

#if !TANDEM_HAVE_MPI

std::unique_ptr<Communicator> make_mpi_communicator(CommOptions) {
  TANDEM_THROW(NotImplemented, "this build has no MPI backend (TANDEM_WITH_MPI=OFF)");
}

#else

namespace {

using detail::abandon;
using detail::advice_for;
using detail::advice_mutex;
using detail::check_mpi;
using detail::finalizing;
using detail::job_broken;
using detail::launch_advice;
using detail::mpi_op;
using detail::mpi_type;
using detail::peer_wait;
using detail::responders_running;
using detail::runtime;

// MPI counts are int: larger buffers go in pieces.
constexpr int64_t kMaxPiece = int64_t{1} << 30;
// A ring step's message goes in pieces of this many bytes, all posted at
// once: over TCP between hosts, one message of 512 KiB or more reached
// 60-80% of a 1 Gbit/s link, pieces of 64-128 KiB 94-100%.
constexpr int64_t kRingPieceBytes = int64_t{1} << 17;

// Messages between the ranks' communicators outside the collectives, on a
// second duplicate of the world communicator: a failing rank's reason, and
// the stall report's question and answers.
enum NoticeTag : int { kAbortTag = 1, kPingTag = 2, kPongTag = 3 };
constexpr int kNoticeBytes = 2048;

using Clock = std::chrono::steady_clock;
// How long a wait tests without sleeping.
constexpr std::chrono::milliseconds kSpinTime{100};
// A wait longer than this asks every peer process, once a period, whether
// it is still there (CommOptions::peer_timeout).
constexpr std::chrono::milliseconds kHeartbeat{1000};
// How often each communicator's responder thread answers those questions.
constexpr std::chrono::milliseconds kResponderPeriod{20};

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(CommOptions options) : Communicator(options) {
    runtime();
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &control_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // Every rank's host and process id, for the stall and unreachable reports.
    const detail::PeerRecord mine = detail::to_record(detail::this_process());
    std::vector<detail::PeerRecord> all(static_cast<size_t>(size_));
    check_mpi(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, comm_),
              "MPI_Allgather");
    for (const detail::PeerRecord& record : all) peers_.push_back(detail::from_record(record));
    {
      std::lock_guard<std::mutex> lock(advice_mutex);
      launch_advice = advice_for(peers_);
    }
    unanswered_since_.assign(static_cast<size_t>(size_), kAnswered);
    peer_wait_ = peer_wait(options.peer_timeout);
    post_notice_receive();
    ++responders_running;
    responder_ = std::thread([this] {
      while (!stopping_.load() && !finalizing.load()) {
        poll_notices();
        std::this_thread::sleep_for(kResponderPeriod);
      }
      --responders_running;
    });
  }
  ~MpiCommunicator() override {
    drain();  // bounded: a broken communicator refuses queued calls at once
    stopping_.store(true);
    responder_.join();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (broken_.load()) {
      // Requests may still be pending: leave them, and the memory they use.
      std::lock_guard<std::mutex> lock(control_mutex_);
      std::vector<std::shared_ptr<const void> > kept = std::move(quarantined_);
      kept.push_back(notice_);
      kept.insert(kept.end(), send_buffers_.begin(), send_buffers_.end());
      abandon(std::move(kept));
      return;
    }
    std::lock_guard<std::mutex> lock(control_mutex_);
    MPI_Cancel(&notice_request_);
    MPI_Wait(&notice_request_, MPI_STATUS_IGNORE);
    for (MPI_Request& r : sends_) MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Comm_free(&control_);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  std::string_view all_reduce_algorithm(int64_t) const override { return "MPI_Allreduce"; }
  void abort(const std::string& reason) override;

 protected:
  void run(const Call& call) override;

 private:
  void verify(const Call& call);
  // Waits for a non-blocking collective of `call`, watching for notices and
  // the deadline; throws PeerFailed or Timeout. The request is then left
  // pending (a peer may still join it, and MPI complete it later), so the
  // call's buffers and `scratch` (any other buffer the request uses) are
  // quarantined: kept alive as long as this communicator.
  void wait(MPI_Request& request, const Call& call, const char* what,
            std::shared_ptr<const void> scratch = nullptr);
  [[noreturn]] void stall(const Call& call, const char* what);
  // Asks each peer process not asked since its last answer whether it is
  // there (at most once per kHeartbeat); returns a peer that has not
  // answered for peer_timeout, or -1.
  int silent_peer();
  [[noreturn]] void unreachable(const Call& call, const char* what, int peer);
  // "rank R (pid P on host H)".
  std::string describe_rank(int rank) const;
  [[noreturn]] void refuse(const Call& call);
  bool must_refuse() const { return broken_.load() && calls_.load() > peer_finished_.load(); }
  void run_collective(const Call& call);
  // Rings of point-to-point messages: libnbc's MPI_Ireduce_scatter_block
  // reduces the whole buffer to one rank and scatters it, and its
  // MPI_Iallgather reached 60% of a 1 Gbit/s link; a ring moves (n - 1) / n
  // of the buffer through each link at its rate.
  void ring_reduce_scatter(const Call& call, MPI_Datatype type);
  void ring_all_gather(const Call& call, MPI_Datatype type);
  // Sends `count` elements to the next rank while receiving as many from the
  // previous one (a ring's step).
  void ring_step(const void* send, void* receive, int count, MPI_Datatype type, const Call& call,
                 const char* what, std::shared_ptr<const void> scratch = nullptr);

  // Control channel; each takes control_mutex_.
  void post_notice_receive();
  // Handles what arrived: an abort breaks this communicator; a ping is
  // answered (this rank is waiting in call `calls_`).
  void poll_notices();
  void send_notice(int to, NoticeTag tag, const void* bytes, int count);
  // Waits (bounded) for the notices sent so far to leave.
  void flush_notices(std::chrono::milliseconds limit);
  void break_communicator(const std::string& reason);

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm control_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  // Collectives started on this rank (the same on every rank); read by
  // whichever thread answers a ping.
  std::atomic<int64_t> calls_{0};
  // Collectives completed on this rank; an abort notice carries it.
  std::atomic<int64_t> finished_{0};
  // The fewest collectives any failed rank completed (-1: this rank broke
  // the communicator). A call that every failed rank completed can still
  // complete here, and must: giving it up would throw from an earlier call
  // than the one the failure happened in (the notice can overtake the last
  // messages of a collective the failed rank already left).
  std::atomic<int64_t> peer_finished_{std::numeric_limits<int64_t>::max()};

  std::mutex control_mutex_;
  MPI_Request notice_request_ = MPI_REQUEST_NULL;
  // On the heap: a broken communicator leaves its receive posted (see the
  // destructor), and MPI may still write a late notice here.
  std::shared_ptr<std::array<char, kNoticeBytes> > notice_ =
      std::make_shared<std::array<char, kNoticeBytes> >();
  std::vector<MPI_Request> sends_;
  // Kept until their sends complete.
  std::vector<std::shared_ptr<std::vector<char> > > send_buffers_;
  std::atomic<bool> broken_{false};
  std::string reason_;  // guarded by control_mutex_
  // Buffers of abandoned requests (guarded likewise).
  std::vector<std::shared_ptr<const void> > quarantined_;
  // Stall report answers: rank -> the calls it had started and finished
  // when it answered (-1: no answer).
  std::vector<std::array<int64_t, 2> > pongs_;
  std::vector<detail::PeerProcess> peers_;  // by rank
  // By rank: when this rank first asked it after its last answer.
  static constexpr Clock::time_point kAnswered = Clock::time_point::max();
  std::vector<Clock::time_point> unanswered_since_;  // guarded by control_mutex_
  Clock::time_point last_heartbeat_;                 // likewise
  std::chrono::milliseconds peer_wait_;
  // Answers peers' questions while this rank computes (or waits).
  std::thread responder_;
  std::atomic<bool> stopping_{false};
};

void MpiCommunicator::post_notice_receive() {
  check_mpi(MPI_Irecv(notice_->data(), kNoticeBytes, MPI_CHAR, MPI_ANY_SOURCE, MPI_ANY_TAG,
                      control_, &notice_request_),
            "MPI_Irecv (notices)");
}

void MpiCommunicator::send_notice(int to, NoticeTag tag, const void* bytes, int count) {
  send_buffers_.push_back(std::make_shared<std::vector<char> >(
      static_cast<const char*>(bytes), static_cast<const char*>(bytes) + count));
  sends_.emplace_back(MPI_REQUEST_NULL);
  MPI_Isend(send_buffers_.back()->data(), count, MPI_CHAR, to, tag, control_, &sends_.back());
}

void MpiCommunicator::poll_notices() {
  std::lock_guard<std::mutex> lock(control_mutex_);
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    if (MPI_Test(&notice_request_, &arrived, &status) != MPI_SUCCESS || !arrived) break;
    int count = 0;
    MPI_Get_count(&status, MPI_CHAR, &count);
    const int from = status.MPI_SOURCE;
    // Any message shows the peer process is there and reachable.
    if (from >= 0 && from < size_) unanswered_since_[static_cast<size_t>(from)] = kAnswered;
    if (status.MPI_TAG == kAbortTag && count >= static_cast<int>(sizeof(int64_t))) {
      int64_t finished = 0;
      std::memcpy(&finished, notice_->data(), sizeof finished);
      peer_finished_.store(std::min(peer_finished_.load(), finished));
      if (!broken_.load()) {
        reason_ = std::string(notice_->data() + sizeof finished,
                              static_cast<size_t>(std::min(count, kNoticeBytes)) - sizeof finished);
        broken_.store(true);
      }
    } else if (status.MPI_TAG == kPingTag) {
      const int64_t calls[2] = {calls_.load(), finished_.load()};
      send_notice(from, kPongTag, calls, sizeof calls);
    } else if (status.MPI_TAG == kPongTag && count == 2 * sizeof(int64_t) && !pongs_.empty()) {
      std::memcpy(pongs_[static_cast<size_t>(from)].data(), notice_->data(), 2 * sizeof(int64_t));
    }
    post_notice_receive();
  }
  // Forget the sends that left.
  for (size_t i = 0; i < sends_.size();) {
    int done = 0;
    MPI_Test(&sends_[i], &done, MPI_STATUS_IGNORE);
    if (done) {
      sends_.erase(sends_.begin() + static_cast<std::ptrdiff_t>(i));
      send_buffers_.erase(send_buffers_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

void MpiCommunicator::flush_notices(std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    poll_notices();
    {
      std::lock_guard<std::mutex> lock(control_mutex_);
      if (sends_.empty()) return;
    }
    if (Clock::now() > deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void MpiCommunicator::break_communicator(const std::string& reason) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  // A call that is running in another thread of this process is refused too.
  peer_finished_.store(-1);
  if (broken_.load()) return;
  reason_ = reason;
  broken_.store(true);
  std::vector<char> notice(sizeof(int64_t));
  const int64_t finished = finished_.load();
  std::memcpy(notice.data(), &finished, sizeof finished);
  notice.insert(notice.end(), reason.begin(),
                reason.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(
                                     kNoticeBytes - sizeof finished, reason.size())));
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) send_notice(r, kAbortTag, notice.data(), static_cast<int>(notice.size()));
  }
}

void MpiCommunicator::abort(const std::string& reason) {
  break_communicator(reason);
  // This rank is probably about to exit: let the notices leave first.
  flush_notices(std::chrono::milliseconds(2000));
}

void MpiCommunicator::refuse(const Call& call) {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    reason = reason_;
  }
  TANDEM_THROW(PeerFailed, reason, " (", call.describe(), " on MPI rank ", rank_, " abandoned)");
}

void MpiCommunicator::wait(MPI_Request& request, const Call& call, const char* what,
                           std::shared_ptr<const void> scratch) {
  const auto start = Clock::now();
  const auto deadline = start + options().timeout;
  for (uint32_t i = 0;; ++i) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    // Non-blocking collectives progress only inside MPI calls: test without
    // pause while a collective usually completes, then back off so that a
    // long wait (a slow peer) does not take a core from the computation.
    const auto waited = Clock::now() - start;
    if ((i & 63) != 0 && waited < kSpinTime) continue;
    poll_notices();
    const bool refused = must_refuse();
    const int silent = waited > kHeartbeat ? silent_peer() : -1;
    const bool timed_out = Clock::now() > deadline;
    if (refused || silent >= 0 || timed_out) {
      std::lock_guard<std::mutex> lock(control_mutex_);
      for (const Tensor& t : {call.input, call.output})
        if (t.defined()) quarantined_.push_back(std::make_shared<const Tensor>(t));
      if (scratch) quarantined_.push_back(std::move(scratch));
    }
    if (refused) refuse(call);
    if (silent >= 0) unreachable(call, what, silent);
    if (timed_out) stall(call, what);
    if (waited > kSpinTime) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void MpiCommunicator::ring_step(const void* send, void* receive, int count, MPI_Datatype type,
                                const Call& call, const char* what,
                                std::shared_ptr<const void> scratch) {
  const int next = (rank_ + 1) % size_, previous = (rank_ + size_ - 1) % size_;
  int type_bytes = 0;
  MPI_Type_size(type, &type_bytes);
  const int piece = std::max(1, static_cast<int>(kRingPieceBytes / std::max(1, type_bytes)));
  std::vector<MPI_Request> requests;
  for (int begin = 0; begin < count; begin += piece) {
    const int n = std::min(piece, count - begin);
    const size_t offset = static_cast<size_t>(begin) * static_cast<size_t>(type_bytes);
    requests.push_back(MPI_REQUEST_NULL);
    check_mpi(MPI_Irecv(static_cast<char*>(receive) + offset, n, type, previous, 0, comm_,
                        &requests.back()),
              what);
    requests.push_back(MPI_REQUEST_NULL);
    check_mpi(MPI_Isend(static_cast<const char*>(send) + offset, n, type, next, 0, comm_,
                        &requests.back()),
              what);
  }
  for (MPI_Request& r : requests) wait(r, call, what, scratch);
}

void MpiCommunicator::ring_reduce_scatter(const Call& call, MPI_Datatype type) {
  // Step s sends the partial sum of segment (rank - s - 1) and receives
  // that of segment (rank - s - 2) from the previous rank, adding this
  // rank's own; after n - 1 steps segment `rank` holds every rank's.
  const int64_t segment = call.count / size_;
  if (segment == 0) return;
  const size_t bytes = static_cast<size_t>(segment) * dtype_size(call.dtype);
  const auto own = [&](int index) {
    return static_cast<const char*>(call.input.raw_data()) +
           static_cast<size_t>((index % size_ + size_) % size_) * bytes;
  };
  if (size_ == 1) {
    std::memcpy(call.output.raw_data(), own(0), bytes);
    return;
  }
  // Received partial sums and two accumulators (one is being sent while the
  // other fills), from the caching allocator (fresh pages for a 16 MiB
  // segment cost more than the step); MPI may still write them after a
  // failure, so they are quarantined with the call's tensors.
  const auto scratch = std::make_shared<const Tensor>(Tensor::empty(
      Shape{3 * segment}, call.dtype, call.input.device(), MemoryCategory::communication));
  char* received = static_cast<char*>(scratch->raw_data());
  char* sums[2] = {received + bytes, received + 2 * bytes};
  const ReduceOp op = call.op == ReduceOp::mean ? ReduceOp::sum : call.op;
  for (int s = 0; s + 1 < size_; ++s) {
    const void* send = s == 0 ? own(rank_ - 1) : sums[(s - 1) % 2];
    ring_step(send, received, static_cast<int>(segment), type, call, "ring reduce-scatter step",
              scratch);
    const bool last = s + 2 == size_;
    void* out = last ? call.output.raw_data() : sums[s % 2];
    const void* parts[2] = {received, own(rank_ - s - 2)};
    kernels::reduce_range(call.dtype, op, 1.0f, parts, 2, &out, 1, 0, segment);
  }
}

void MpiCommunicator::ring_all_gather(const Call& call, MPI_Datatype type) {
  // Step s passes on block (rank - s) and receives block (rank - s - 1).
  const size_t bytes = static_cast<size_t>(call.count) * dtype_size(call.dtype);
  char* out = static_cast<char*>(call.output.raw_data());
  const auto block = [&](int index) {
    return out + static_cast<size_t>((index % size_ + size_) % size_) * bytes;
  };
  if (block(rank_) != call.input.raw_data())
    std::memcpy(block(rank_), call.input.raw_data(), bytes);
  if (call.count == 0) return;
  for (int s = 0; s + 1 < size_; ++s) {
    ring_step(block(rank_ - s), block(rank_ - s - 1), static_cast<int>(call.count), type, call,
              "ring all-gather step");
  }
}

int MpiCommunicator::silent_peer() {
  std::lock_guard<std::mutex> lock(control_mutex_);
  const auto now = Clock::now();
  for (int r = 0; r < size_; ++r) {
    const Clock::time_point since = unanswered_since_[static_cast<size_t>(r)];
    if (r != rank_ && since != kAnswered && now - since > peer_wait_) return r;
  }
  if (now - last_heartbeat_ < kHeartbeat) return -1;
  last_heartbeat_ = now;
  const int64_t mine = calls_.load();
  for (int r = 0; r < size_; ++r) {
    Clock::time_point& since = unanswered_since_[static_cast<size_t>(r)];
    if (r == rank_ || since != kAnswered) continue;
    since = now;
    send_notice(r, kPingTag, &mine, sizeof mine);
  }
  return -1;
}

std::string MpiCommunicator::describe_rank(int rank) const {
  const detail::PeerProcess& peer = peers_[static_cast<size_t>(rank)];
  return tandem::detail::concat("rank ", rank, " (pid ", peer.pid, " on host ",
                                peer.host.empty() ? "?" : peer.host, ")");
}

void MpiCommunicator::unreachable(const Call& call, const char* what, int peer) {
  const std::string report = tandem::detail::concat(
      "host ", peers_[static_cast<size_t>(peer)].host, " unreachable: ", describe_rank(peer),
      " answered nothing for ", peer_wait_.count() / 1000.0, " s while ", describe_rank(rank_),
      " waited in ", call.describe(), " #", calls_.load(), " (", what,
      "); the link to it or the host is down, or the process is frozen or has left the job");
  // MPI_Finalize would wait for the lost rank.
  job_broken.store(true);
  break_communicator(report);
  flush_notices(std::chrono::milliseconds(2000));
  TANDEM_THROW(PeerFailed, report);
}

void MpiCommunicator::stall(const Call& call, const char* what) {
  // Ask every rank which call it waits in; ranks inside a collective answer
  // from their wait loop, a stopped or hung one does not.
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    pongs_.assign(static_cast<size_t>(size_), {-1, -1});
    const int64_t mine = calls_.load();
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) send_notice(r, kPingTag, &mine, sizeof mine);
    }
  }
  const auto deadline = Clock::now() + std::min<std::chrono::milliseconds>(options().timeout,
                                                                           std::chrono::seconds(3));
  const auto all_answered = [&] {
    std::lock_guard<std::mutex> lock(control_mutex_);
    int answered = 0;
    for (int r = 0; r < size_; ++r)
      answered += r != rank_ && pongs_[static_cast<size_t>(r)][0] >= 0;
    return answered == size_ - 1;
  };
  for (;;) {
    poll_notices();
    if (all_answered() || Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string silent, elsewhere, states;
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const auto [started, finished] = pongs_[static_cast<size_t>(r)];
      if (started < 0) {
        silent += (silent.empty() ? "" : ", ") + std::to_string(r);
        // A silent rank on this host can be looked at.
        const detail::PeerProcess& peer = peers_[static_cast<size_t>(r)];
        const bool here = peer.host == peers_[static_cast<size_t>(rank_)].host;
        const std::string state = here ? detail::process_state(peer.pid) : std::string();
        states += tandem::detail::concat("; rank ", r, " (pid ", peer.pid,
                                         here ? ", this host) " : ", host " + peer.host + ") ",
                                         state.empty() ? "cannot be looked at from here" : state);
      } else if (started != calls_.load()) {
        elsewhere += tandem::detail::concat(
            elsewhere.empty() ? "" : ", ", r,
            started == finished ? " (outside the collectives after call #" : " (waits in call #",
            started, ")");
      }
    }
    pongs_.clear();
  }
  std::string report = tandem::detail::concat("stall: ", call.describe(), " #", calls_.load(), " (",
                                              what, ") on MPI rank ", rank_, " timed out after ",
                                              options().timeout.count(), " ms");
  if (!silent.empty()) {
    report += "; rank(s) " + silent + " did not answer (stopped, or its host unreachable)" + states;
  }
  if (!elsewhere.empty()) report += "; rank(s) " + elsewhere + " are in another call";
  if (silent.empty() && elsewhere.empty()) report += "; every rank waits in this call";
  job_broken.store(true);
  break_communicator(report);
  flush_notices(std::chrono::milliseconds(2000));
  TANDEM_THROW(Timeout, report);
}

void MpiCommunicator::verify(const Call& call) {
  // On the heap: an abandoned check may still be completed by MPI later.
  const auto buffer = std::make_shared<std::array<int64_t, 12> >(call.check_fields());
  MPI_Request request;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buffer->data(), 12, MPI_INT64_T, MPI_MAX, comm_, &request),
            "MPI_Iallreduce (call check)");
  wait(request, call, "MPI_Iallreduce (call check)", buffer);
  call.check_agreement(*buffer, "MPI", rank_);
}

void MpiCommunicator::run(const Call& call) {
  ++calls_;
  if (must_refuse()) refuse(call);
  run_collective(call);
  ++finished_;
}

void MpiCommunicator::run_collective(const Call& call) {
  if (options().verify_calls || !call.error.empty()) {
    verify(call);
    // The check is an all-reduce: every rank has arrived once it returns.
    mark_all_ranks_arrived();
  }
  const MPI_Datatype type = mpi_type(call.dtype);
  const size_t element = dtype_size(call.dtype);
  // Non-blocking calls and a wait that can give up: a blocking MPI call
  // cannot be left when a peer fails or stops.
  MPI_Request request = MPI_REQUEST_NULL;
  switch (call.collective) {
    case Collective::barrier:
      check_mpi(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
      wait(request, call, "MPI_Ibarrier");
      return;
    case Collective::all_reduce: {
      const bool in_place = call.input.raw_data() == call.output.raw_data();
      const MPI_Op op = mpi_op(call.dtype, call.op);
      for (int64_t begin = 0; begin < call.count; begin += kMaxPiece) {
        const int n = static_cast<int>(std::min(kMaxPiece, call.count - begin));
        void* out = static_cast<char*>(call.output.raw_data()) + begin * element;
        const void* in = in_place
                             ? MPI_IN_PLACE
                             : static_cast<const char*>(call.input.raw_data()) + begin * element;
        check_mpi(MPI_Iallreduce(in, out, n, type, op, comm_, &request), "MPI_Iallreduce");
        wait(request, call, "MPI_Iallreduce");
      }
      if (call.op == ReduceOp::mean) {
        kernels::scale_in_place(call.dtype, call.output.raw_data(), call.output.numel(),
                                1.0f / static_cast<float>(size_));
      }
      return;
    }
    case Collective::reduce_scatter:
      if (call.count / size_ > kMaxPiece)
        TANDEM_THROW(NotImplemented, "reduce_scatter segments over 2^30 elements");
      ring_reduce_scatter(call, type);
      if (call.op == ReduceOp::mean) {
        kernels::scale_in_place(call.dtype, call.output.raw_data(), call.output.numel(),
                                1.0f / static_cast<float>(size_));
      }
      return;
    case Collective::all_gather:
      if (call.count > kMaxPiece)
        TANDEM_THROW(NotImplemented, "all_gather inputs over 2^30 elements");
      ring_all_gather(call, type);
      return;
    case Collective::broadcast:
      for (int64_t begin = 0; begin < call.count; begin += kMaxPiece) {
        const int n = static_cast<int>(std::min(kMaxPiece, call.count - begin));
        check_mpi(MPI_Ibcast(static_cast<char*>(call.output.raw_data()) + begin * element, n, type,
                             call.root, comm_, &request),
                  "MPI_Ibcast");
        wait(request, call, "MPI_Ibcast");
      }
      return;
  }
}

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(CommOptions options) {
  return std::make_unique<MpiCommunicator>(options);
}

#endif

}  // namespace tandem::comm
