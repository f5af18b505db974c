#pragma once
// Communicator: the one interface for collectives between ranks (devices),
// whatever carries the bytes: threads of one process (InProcessGroup), MPI
// processes (make_mpi_communicator), or both (HierarchicalCommunicator).
//
// Contract shared by every implementation:
//  1. Every rank of a group calls the same collectives in the same order, with
//     the same dtype, element count, op and root. Where an implementation can
//     detect a mismatch, every rank throws CommError naming it instead of
//     hanging or returning a wrong answer.
//  2. Buffers are contiguous tensors of f32, bf16, f16 or i32. input and
//     output may be the same tensor (in place). bf16/f16 sums accumulate in
//     float32 within each reduction the implementation computes itself; a
//     ring that passes partial sums between processes (the MPI backend's
//     reduce-scatter, as NCCL's and gloo's rings) rounds them to the dtype
//     at each hop, so that error grows with the number of processes.
//  3. Synchronous calls return when this rank's output is complete and its
//     input may be reused. Asynchronous calls return a Work to wait on; the
//     collectives of one communicator run in the order they were issued,
//     synchronous ones after every earlier asynchronous one.
//  4. Blocking waits time out (CommOptions::timeout) with a Timeout error
//     naming the ranks that did not arrive, where that is known. A timeout
//     breaks the group, as abort() does. Between processes, a rank whose
//     process answers nothing for CommOptions::peer_timeout while another
//     waits for it (its host unreachable, or the process frozen) ends the
//     wait sooner, with PeerFailed naming the rank and its host (MPI; gloo's
//     transport has no such probe: its waits end at the timeout, or at once
//     when a peer's connection closes).
//  5. A rank that fails calls abort(reason): every rank waiting in, or later
//     calling, a collective of the group throws PeerFailed carrying the
//     reason (within a poll interval, about 0.1 s), instead of waiting for a
//     rank that will never arrive. Buffers a broken call had handed to the
//     group stay allocated until the communicator is destroyed, so a late
//     peer never writes into freed memory.

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "tandem/tensor/tensor.h"

namespace tandem::comm {

enum class ReduceOp : uint8_t { sum, mean, max, min };

std::string_view reduce_op_name(ReduceOp op);
// "sum", "mean", "max", "min"; throws InvalidArgument otherwise.
ReduceOp parse_reduce_op(std::string_view name);

struct CommOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Between processes: how long a waiting rank goes on asking a silent peer
  // process (one that answers nothing, not even "busy") before it gives the
  // peer up as unreachable. Well below `timeout`: a slow peer still answers.
  std::chrono::milliseconds peer_timeout{std::chrono::seconds(15)};
  // Cross-rank check of every call's (collective, dtype, count, op, root).
  bool verify_calls = true;
};

// Completion of an asynchronous collective.
class Work {
 public:
  // Blocks until done; rethrows the collective's error. Throws Timeout after
  // `timeout` (the collective itself keeps running).
  void wait(std::chrono::milliseconds timeout = std::chrono::hours(24));
  bool done() const;

  // When the collective started and when it finished (valid once done()).
  // Started is when every rank had arrived, where the backend can tell
  // (in-process; MPI with verify_calls; the leader of a hierarchical
  // group), else when this rank's communication thread picked it up;
  // so finished - started is the collective's own time, not the wait for
  // slower ranks to launch it.
  std::chrono::steady_clock::time_point started() const;
  std::chrono::steady_clock::time_point finished() const;

  // For implementations: marks the start, and completion with the error if it failed.
  void start();
  void finish(std::exception_ptr error = nullptr);
  void set_description(std::string description) { description_ = std::move(description); }

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::string description_;
  std::chrono::steady_clock::time_point started_, finished_;
};

enum class Collective : uint8_t { all_reduce, reduce_scatter, all_gather, broadcast, barrier };
std::string_view collective_name(Collective collective);

// One collective call as an implementation sees it.
struct Call {
  Collective collective = Collective::barrier;
  DType dtype = DType::f32;
  int64_t count = 0;  // elements of this rank's input (broadcast: of the buffer)
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  Tensor input, output;  // broadcast: both the buffer
  // Non-empty when this rank's arguments are invalid: implementations still
  // take part in the cross-rank check (so no rank hangs), then throw.
  std::string error;

  // "all_reduce(sum, f32, 1000 elements)"
  std::string describe() const;
  // True when two ranks' calls can pair up.
  bool matches(const Call& other) const;

  // For a cross-rank check by one all-reduce with max: the call's six
  // fields (collective, dtype, count, op, root, invalid) and their
  // negations, so that the maximum over ranks holds each field's maximum
  // and minus its minimum.
  std::array<int64_t, 12> check_fields() const;
  // After that all-reduce (`reduced`): throws CommError when this call is
  // invalid, another rank's was, or a field that matters for this call
  // differs between ranks. `backend` ("MPI", "gloo") and `rank` name this
  // side in the message.
  void check_agreement(const std::array<int64_t, 12>& reduced, std::string_view backend,
                       int rank) const;
};

class WorkQueue;

class Communicator {
 public:
  virtual ~Communicator();

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "inprocess", "mpi", "hierarchical", "nccl"
  virtual std::string backend() const = 0;
  // Whether calls may pass buffers in GPU memory (both on one device); a
  // backend that answers false is given host buffers only.
  virtual bool takes_gpu_buffers() const { return false; }
  // How this communicator all-reduces a buffer of `bytes` per rank, for
  // reports: "staged" or "sliced" in process, "MPI_Allreduce",
  // "local+MPI_Allreduce+broadcast". A string literal.
  virtual std::string_view all_reduce_algorithm(int64_t bytes) const = 0;

  // output = op over ranks of input (same shape and dtype).
  void all_reduce(const Tensor& input, const Tensor& output, ReduceOp op);
  void all_reduce(const Tensor& buffer, ReduceOp op) { all_reduce(buffer, buffer, op); }
  // input has size() * output.numel() elements; rank r receives op over ranks of
  // input elements [r * n, (r + 1) * n).
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op);
  // output has size() * input.numel() elements: rank r's input at [r * n, (r + 1) * n).
  void all_gather(const Tensor& input, const Tensor& output);
  // Every rank's buffer becomes root's.
  void broadcast(const Tensor& buffer, int root);
  void barrier();

  std::shared_ptr<Work> all_reduce_async(const Tensor& input, const Tensor& output, ReduceOp op);
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& input, const Tensor& output,
                                             ReduceOp op);
  std::shared_ptr<Work> all_gather_async(const Tensor& input, const Tensor& output);
  std::shared_ptr<Work> broadcast_async(const Tensor& buffer, int root);

  // Breaks the group for every rank (contract 5). Idempotent: the first
  // reason wins. Safe from any thread, including while this rank's own
  // collective is in flight.
  virtual void abort(const std::string& reason) = 0;

  const CommOptions& options() const { return options_; }

 protected:
  explicit Communicator(CommOptions options);

  // Called on the issuing thread for every call, in issue order, before the
  // call is queued or run: a backend that must order the call after work the
  // issuing thread queued elsewhere (its GPU stream) notes that here.
  virtual void on_issue(const Call& call);
  // Carries out one call, from the calling thread or the progress thread, in
  // issue order. Must throw (after the cross-rank check) when call.error is set.
  virtual void run(const Call& call) = 0;
  // For implementations of run(): every rank has arrived and the data
  // movement begins; restamps the start of the asynchronous Work being run.
  static void mark_all_ranks_arrived();

  // Waits until every asynchronous collective issued so far has finished.
  void drain();

 private:
  Call make_call(Collective collective, const Tensor& input, const Tensor& output, ReduceOp op,
                 int root) const;
  void run_now(const Call& call);
  std::shared_ptr<Work> submit(Call call);

  CommOptions options_;
  std::mutex queue_mutex_;
  std::unique_ptr<WorkQueue> queue_;
};

// True for the dtypes collectives accept (f32, bf16, f16, i32).
bool collective_dtype(DType dtype);

}  // namespace tandem::comm
