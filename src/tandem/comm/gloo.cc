#include "tandem/comm/gloo.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <signal.h>

#include <array>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "tandem/base/error.h"
#include "tandem/comm/detail/reduce_kernels.h"

namespace tandem::comm {
namespace {

using std::chrono::milliseconds;

// gloo's view of a tandem store, under the group's prefix.
class StoreForGloo : public gloo::rendezvous::Store {
 public:
  StoreForGloo(comm::Store& store, std::string prefix, milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::string_view(data.data(), data.size()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string value = store_.get(prefix_ + key, timeout_);
    return {value.begin(), value.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (const std::string& key : keys) {
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      store_.get(prefix_ + key, std::max(left, milliseconds(0)));
    }
  }

 private:
  comm::Store& store_;
  std::string prefix_;
  milliseconds timeout_;
};

// The group's state, shared with the thread that runs its gloo calls: a
// caller waits for that thread and can leave the wait when the group is
// aborted (gloo's own waits end only at their timeout), and the thread's
// task owns its buffers, so a call given up on never touches freed memory.
struct GlooState {
  std::shared_ptr<Store> store;
  std::string prefix;
  int rank = 0, size = 1;
  CommOptions options;
  std::shared_ptr<gloo::rendezvous::Context> context;

  std::mutex mutex;
  std::condition_variable cv;
  std::function<void()> task;  // set by a caller, cleared by the thread when done
  std::exception_ptr error;
  bool stopping = false;
  std::string broken;  // why the group cannot be used any more
  std::thread thread;

  std::string abort_key() const { return prefix + "/abort"; }

  void serve() {
    std::unique_lock lock(mutex);
    for (;;) {
      cv.wait(lock, [&] { return stopping || task; });
      if (!task) return;
      auto run = task;
      lock.unlock();
      std::exception_ptr failure;
      try {
        run();
      } catch (...) {
        failure = std::current_exception();
      }
      lock.lock();
      error = failure;
      task = nullptr;
      cv.notify_all();
    }
  }

  // Why a gloo call failed, as this rank can tell: an aborting peer's
  // reason from the store, else gloo's message.
  [[noreturn]] void fail(const std::string& what, const std::string& gloo_message) {
    std::string reason;
    try {
      if (auto noted = store->try_get(abort_key())) reason = *noted;
    } catch (const Error&) {
      // The store is gone too: gloo's message is all there is.
    }
    const bool timed_out = reason.empty() && gloo_message.find("Timed out") != std::string::npos;
    {
      std::lock_guard lock(mutex);
      if (broken.empty()) broken = reason.empty() ? gloo_message : reason;
    }
    if (timed_out) {
      TANDEM_THROW(Timeout, what, " on gloo rank ", rank, " of ", size,
                   ": a peer did not take part within ", options.timeout.count(),
                   " ms (stopped, hung or cut off): ", gloo_message);
    }
    if (!reason.empty()) TANDEM_THROW(PeerFailed, "gloo group ", prefix, " aborted by ", reason);
    TANDEM_THROW(PeerFailed, what, " on gloo rank ", rank, " of ", size,
                 ": a peer process ended or closed its connection (", gloo_message, ")");
  }

  // Runs `work` on the gloo thread and waits for it, or for an abort.
  void execute(const std::string& what, std::function<void()> work) {
    std::unique_lock lock(mutex);
    if (!broken.empty()) TANDEM_THROW(PeerFailed, "gloo group ", prefix, " is broken: ", broken);
    task = std::move(work);
    error = nullptr;
    cv.notify_all();
    for (;;) {
      cv.wait_for(lock, milliseconds(100), [&] { return !task || !broken.empty(); });
      if (!task) break;
      if (!broken.empty()) {
        TANDEM_THROW(PeerFailed, what, " on gloo rank ", rank, " given up: ", broken);
      }
    }
    if (!error) return;
    const std::exception_ptr failure = error;
    lock.unlock();
    try {
      std::rethrow_exception(failure);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      fail(what, e.what());
    }
  }
};

template <typename F>
void with_element_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(float{});
    case DType::i32:
      return f(int32_t{});
    default:
      return f(uint16_t{});  // bf16, f16: their arithmetic is the reduce function's
  }
}

gloo::AllreduceOptions::Func reduce_function(DType dtype, ReduceOp op) {
  const ReduceOp combine = op == ReduceOp::mean ? ReduceOp::sum : op;
  return [dtype, combine](void* out, const void* a, const void* b, size_t n) {
    const void* inputs[2] = {a, b};
    void* outputs[1] = {out};
    kernels::reduce_range(dtype, combine, 1.0f, inputs, 2, outputs, 1, 0, static_cast<int64_t>(n));
  };
}

// output (count elements) = op over ranks of input; in place when they are one buffer.
void gloo_all_reduce(const std::shared_ptr<gloo::Context>& context, const void* input, void* output,
                     int64_t count, DType dtype, ReduceOp op, milliseconds timeout) {
  with_element_type(dtype, [&](auto element) {
    using T = decltype(element);
    gloo::AllreduceOptions o(context);
    if (input != output) o.setInput(static_cast<T*>(const_cast<void*>(input)), count);
    o.setOutput(static_cast<T*>(output), count);
    o.setReduceFunction(reduce_function(dtype, op));
    o.setTimeout(timeout);
    gloo::allreduce(o);
  });
  if (op == ReduceOp::mean) kernels::scale_in_place(dtype, output, count, 1.0f / context->size);
}

class GlooCommunicator : public Communicator {
 public:
  explicit GlooCommunicator(std::shared_ptr<GlooState> state)
      : Communicator(state->options), state_(std::move(state)) {}

  ~GlooCommunicator() override {
    drain_quietly();
    bool idle = false;
    {
      std::lock_guard lock(state_->mutex);
      state_->stopping = true;
      idle = !state_->task;
      state_->cv.notify_all();
    }
    if (!idle) {
      // A call given up on after an abort: its peers are gone, so it ends
      // at gloo's timeout; the thread owns what it uses.
      state_->context->closeConnections();
      state_->thread.detach();
    } else {
      state_->thread.join();
    }
  }

  int rank() const override { return state_->rank; }
  int size() const override { return state_->size; }
  std::string backend() const override { return "gloo"; }
  std::string_view all_reduce_algorithm(int64_t) const override { return "gloo ring"; }

  void abort(const std::string& reason) override {
    // From another thread the owner may destroy this communicator as soon
    // as the notify wakes its call: hold the state, and touch nothing of
    // `this` after it.
    const std::shared_ptr<GlooState> state = state_;
    {
      std::lock_guard lock(state->mutex);
      if (!state->broken.empty()) return;
      state->broken = "rank " + std::to_string(state->rank) + ": " + reason;
      state->cv.notify_all();
    }
    try {
      state->store->set(state->abort_key(), state->broken);
    } catch (const Error&) {
      // Without the store the peers still see the closed connections.
    }
    state->context->closeConnections();
  }

 protected:
  void run(const Call& call) override {
    if (!call.error.empty() && !options().verify_calls) {
      // The peers run their real collective, not the check, so this rank's
      // check would be paired with it: break the group instead (they end
      // with PeerFailed) and fail here.
      abort(call.error);
      TANDEM_THROW(CommError, call.error);
    }
    if (options().verify_calls || !call.error.empty()) {
      verify(call);
      mark_all_ranks_arrived();
    }
    if (call.collective == Collective::barrier) {
      execute(call, [](GlooState& s) {
        gloo::BarrierOptions o(s.context);
        o.setTimeout(s.options.timeout);
        gloo::barrier(o);
      });
      return;
    }
    if (call.count == 0) return;
    switch (call.collective) {
      case Collective::all_reduce:
        execute(call, [call](GlooState& s) {
          gloo_all_reduce(s.context, call.input.raw_data(), call.output.raw_data(), call.count,
                          call.dtype, call.op, s.options.timeout);
        });
        return;
      case Collective::reduce_scatter:
        execute(call, [call](GlooState& s) {
          const size_t element = dtype_size(call.dtype);
          std::vector<char> sum(static_cast<size_t>(call.count) * element);
          std::memcpy(sum.data(), call.input.raw_data(), sum.size());
          gloo_all_reduce(s.context, sum.data(), sum.data(), call.count, call.dtype, call.op,
                          s.options.timeout);
          const size_t segment = sum.size() / static_cast<size_t>(s.size);
          std::memcpy(call.output.raw_data(), sum.data() + segment * static_cast<size_t>(s.rank),
                      segment);
        });
        return;
      case Collective::all_gather:
        execute(call, [call](GlooState& s) {
          const size_t bytes = static_cast<size_t>(call.count) * dtype_size(call.dtype);
          gloo::AllgatherOptions o(s.context);
          o.setInput(static_cast<uint8_t*>(call.input.raw_data()), bytes);
          o.setOutput(static_cast<uint8_t*>(call.output.raw_data()),
                      bytes * static_cast<size_t>(s.size));
          o.setTimeout(s.options.timeout);
          gloo::allgather(o);
        });
        return;
      case Collective::broadcast:
        execute(call, [call](GlooState& s) {
          gloo::BroadcastOptions o(s.context);
          o.setOutput(static_cast<uint8_t*>(call.output.raw_data()),
                      static_cast<size_t>(call.count) * dtype_size(call.dtype));
          o.setRoot(call.root);
          o.setTimeout(s.options.timeout);
          gloo::broadcast(o);
        });
        return;
      case Collective::barrier:
        return;
    }
  }

 private:
  void execute(const Call& call, std::function<void(GlooState&)> work) {
    GlooState* s = state_.get();
    state_->execute(call.describe(), [s, work = std::move(work)] { work(*s); });
  }

  // Every rank's call, checked by one all-reduce (Call::check_fields).
  void verify(const Call& call) {
    auto both = std::make_shared<std::array<int64_t, 12>>(call.check_fields());
    GlooState* s = state_.get();
    state_->execute(call.describe() + " (call check)", [s, both] {
      gloo::AllreduceOptions o(s->context);
      o.setOutput(both->data(), both->size());
      o.setReduceFunction([](void* out, const void* a, const void* b, size_t n) {
        for (size_t i = 0; i < n; ++i) {
          static_cast<int64_t*>(out)[i] =
              std::max(static_cast<const int64_t*>(a)[i], static_cast<const int64_t*>(b)[i]);
        }
      });
      o.setTimeout(s->options.timeout);
      gloo::allreduce(o);
    });
    call.check_agreement(*both, "gloo", state_->rank);
  }

  void drain_quietly() {
    try {
      drain();
    } catch (...) {
      // Errors of asynchronous calls belong to their Work.
    }
  }

  std::shared_ptr<GlooState> state_;
};

// gloo writes to its sockets without MSG_NOSIGNAL: a write to a peer that
// just ended would kill this process with SIGPIPE instead of failing the
// collective with PeerFailed. Ignored unless the program handles it.
void ignore_broken_pipes() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, nullptr);
  }
}

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(std::shared_ptr<Store> store,
                                                     const std::string& prefix, int rank, int size,
                                                     CommOptions options) {
  if (!store) TANDEM_THROW(InvalidArgument, "make_gloo_communicator: no store");
  if (size < 1 || rank < 0 || rank >= size) {
    TANDEM_THROW(InvalidArgument, "gloo rank ", rank, " is outside a group of ", size);
  }
  ignore_broken_pipes();
  auto state = std::make_shared<GlooState>();
  state->store = std::move(store);
  state->prefix = prefix;
  state->rank = rank;
  state->size = size;
  state->options = options;
  gloo::transport::tcp::attr attr;
  attr.hostname = state->store->local_address();
  auto device = gloo::transport::tcp::CreateDevice(attr);
  state->context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  state->context->setTimeout(options.timeout);
  StoreForGloo gloo_store(*state->store, prefix + "/", options.timeout);
  try {
    state->context->connectFullMesh(gloo_store, device);
  } catch (const Error& e) {
    TANDEM_THROW(Timeout, "gloo rank ", rank, " of ", size, ": the group ", prefix,
                 " did not assemble (", e.what(), ")");
  } catch (const std::exception& e) {
    TANDEM_THROW(PeerFailed, "gloo rank ", rank, " of ", size, " cannot connect to its peers in ",
                 prefix, ": ", e.what());
  }
  // The thread holds the state: one left running after the communicator
  // is gone (detached) still finds its context and buffers.
  state->thread = std::thread([state] { state->serve(); });
  return std::make_unique<GlooCommunicator>(std::move(state));
}

}  // namespace tandem::comm
