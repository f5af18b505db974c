// The MPI communicator's control channel (detail/mpi_control.h).
#include "tandem/config.h"
#if TANDEM_HAVE_MPI
#include "tandem/comm/detail/mpi_control.h"

#include <algorithm>
#include <cstring>

#include "tandem/base/error.h"
#include "tandem/comm/detail/mpi_runtime.h"

namespace tandem::comm::detail {
namespace {

// How often the responder thread answers questions.
constexpr std::chrono::milliseconds kResponderPeriod{20};
// How long a rank that ends the job waits for its notices to leave.
constexpr std::chrono::milliseconds kFlushLimit{2000};

}  // namespace

MpiControl::MpiControl(std::chrono::milliseconds peer_timeout)
    : peer_wait_(peer_wait(peer_timeout)) {
  runtime();
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &channel_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(channel_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(channel_, &rank_);
  MPI_Comm_size(channel_, &size_);
  const PeerRecord mine = to_record(this_process());
  std::vector<PeerRecord> all(static_cast<size_t>(size_));
  check_mpi(
      MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, channel_),
      "MPI_Allgather");
  for (const PeerRecord& record : all) peers_.push_back(from_record(record));
  {
    std::lock_guard<std::mutex> lock(advice_mutex);
    launch_advice = advice_for(peers_);
  }
  unanswered_since_.assign(static_cast<size_t>(size_), kAnswered);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    post_receive();
  }
  ++responders_running;
  responder_ = std::thread([this] {
    while (!stopping_.load() && !finalizing.load()) {
      poll();
      std::this_thread::sleep_for(kResponderPeriod);
    }
    --responders_running;
  });
}

bool MpiControl::close() {
  if (closed_) return broken_.load();
  closed_ = true;
  stopping_.store(true);
  responder_.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return broken_.load();
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_.load()) {
    std::vector<std::shared_ptr<const void> > kept = std::move(quarantined_);
    kept.push_back(notice_);
    kept.insert(kept.end(), send_buffers_.begin(), send_buffers_.end());
    abandon(std::move(kept));
    return true;
  }
  MPI_Cancel(&receive_);
  MPI_Wait(&receive_, MPI_STATUS_IGNORE);
  for (MPI_Request& r : sends_) MPI_Wait(&r, MPI_STATUS_IGNORE);
  MPI_Comm_free(&channel_);
  return false;
}

MpiControl::~MpiControl() {
  close();
}

void MpiControl::post_receive() {
  check_mpi(MPI_Irecv(notice_->data(), kNoticeBytes, MPI_CHAR, MPI_ANY_SOURCE, MPI_ANY_TAG,
                      channel_, &receive_),
            "MPI_Irecv (notices)");
}

void MpiControl::send(int to, NoticeTag tag, const void* bytes, int count) {
  send_buffers_.push_back(std::make_shared<std::vector<char> >(
      static_cast<const char*>(bytes), static_cast<const char*>(bytes) + count));
  sends_.emplace_back(MPI_REQUEST_NULL);
  MPI_Isend(send_buffers_.back()->data(), count, MPI_CHAR, to, tag, channel_, &sends_.back());
}

void MpiControl::poll() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    if (MPI_Test(&receive_, &arrived, &status) != MPI_SUCCESS || !arrived) break;
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
      send(from, kPongTag, calls, sizeof calls);
    } else if (status.MPI_TAG == kPongTag && count == 2 * sizeof(int64_t) && !pongs_.empty()) {
      std::memcpy(pongs_[static_cast<size_t>(from)].data(), notice_->data(), 2 * sizeof(int64_t));
    }
    post_receive();
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

void MpiControl::flush(std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    poll();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (sends_.empty()) return;
    }
    if (Clock::now() > deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void MpiControl::break_channel(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
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
    if (r != rank_) send(r, kAbortTag, notice.data(), static_cast<int>(notice.size()));
  }
}

void MpiControl::abort(const std::string& reason) {
  break_channel(reason);
  // This rank is probably about to exit: let the notices leave first.
  flush(kFlushLimit);
}

void MpiControl::quarantine(std::shared_ptr<const void> memory) {
  std::lock_guard<std::mutex> lock(mutex_);
  quarantined_.push_back(std::move(memory));
}

void MpiControl::refuse(const Call& call) {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reason = reason_;
  }
  TANDEM_THROW(PeerFailed, reason, " (", call.describe(), " on MPI rank ", rank_, " abandoned)");
}

int MpiControl::silent_peer() {
  std::lock_guard<std::mutex> lock(mutex_);
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
    send(r, kPingTag, &mine, sizeof mine);
  }
  return -1;
}

std::string MpiControl::describe_rank(int rank) const {
  const PeerProcess& peer = peers_[static_cast<size_t>(rank)];
  return tandem::detail::concat("rank ", rank, " (pid ", peer.pid, " on host ",
                                peer.host.empty() ? "?" : peer.host, ")");
}

template <class E>
void MpiControl::end_job(const std::string& report) {
  // MPI_Finalize would wait for the rank that is gone or stopped.
  job_broken.store(true);
  abort(report);
  throw E(report);
}

void MpiControl::unreachable(const Call& call, const char* what, int peer) {
  end_job<PeerFailed>(tandem::detail::concat(
      "host ", peers_[static_cast<size_t>(peer)].host, " unreachable: ", describe_rank(peer),
      " answered nothing for ", peer_wait_.count() / 1000.0, " s while ", describe_rank(rank_),
      " waited in ", call.describe(), " #", calls_.load(), " (", what,
      "); the link to it or the host is down, or the process is frozen or has left the job"));
}

void MpiControl::stall(const Call& call, const char* what, std::chrono::milliseconds timeout) {
  // Ask every rank which call it waits in; ranks inside a collective answer
  // from their wait loop (or the responder), a stopped or hung one does not.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pongs_.assign(static_cast<size_t>(size_), {-1, -1});
    const int64_t mine = calls_.load();
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) send(r, kPingTag, &mine, sizeof mine);
    }
  }
  const auto deadline =
      Clock::now() + std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(3));
  const auto all_answered = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    int answered = 0;
    for (int r = 0; r < size_; ++r)
      answered += r != rank_ && pongs_[static_cast<size_t>(r)][0] >= 0;
    return answered == size_ - 1;
  };
  for (;;) {
    poll();
    if (all_answered() || Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  end_job<Timeout>(tandem::detail::concat("stall: ", call.describe(), " #", calls_.load(), " (",
                                          what, ") on MPI rank ", rank_, " timed out after ",
                                          timeout.count(), " ms", stall_findings()));
}

std::string MpiControl::stall_findings() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string silent, elsewhere, states;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const auto [started, finished] = pongs_[static_cast<size_t>(r)];
    if (started < 0) {
      silent += (silent.empty() ? "" : ", ") + std::to_string(r);
      // A silent rank on this host can be looked at.
      const PeerProcess& peer = peers_[static_cast<size_t>(r)];
      const bool here = peer.host == peers_[static_cast<size_t>(rank_)].host;
      const std::string state = here ? process_state(peer.pid) : std::string();
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
  std::string findings;
  if (!silent.empty()) {
    findings +=
        "; rank(s) " + silent + " did not answer (stopped, or its host unreachable)" + states;
  }
  if (!elsewhere.empty()) findings += "; rank(s) " + elsewhere + " are in another call";
  if (silent.empty() && elsewhere.empty()) findings += "; every rank waits in this call";
  return findings;
}

}  // namespace tandem::comm::detail
#endif
