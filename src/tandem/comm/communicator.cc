#include "tandem/comm/communicator.h"

#include "tandem/base/error.h"
#include "tandem/base/trace.h"
#include "tandem/comm/detail/work_queue.h"

namespace tandem::comm {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::mean:
      return "mean";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "invalid";
}

ReduceOp parse_reduce_op(std::string_view name) {
  if (name == "sum") return ReduceOp::sum;
  if (name == "mean") return ReduceOp::mean;
  if (name == "max") return ReduceOp::max;
  if (name == "min") return ReduceOp::min;
  TANDEM_THROW(InvalidArgument, "unknown reduce op '", name, "' (expected sum, mean, max or min)");
}

std::string_view collective_name(Collective collective) {
  switch (collective) {
    case Collective::all_reduce:
      return "all_reduce";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::all_gather:
      return "all_gather";
    case Collective::broadcast:
      return "broadcast";
    case Collective::barrier:
      return "barrier";
  }
  return "invalid";
}

bool collective_dtype(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::i32;
}

std::string Call::describe() const {
  switch (collective) {
    case Collective::barrier:
      return "barrier";
    case Collective::broadcast:
      return tandem::detail::concat("broadcast(root ", root, ", ", dtype_name(dtype), ", ", count,
                                    " elements)");
    case Collective::all_gather:
      return tandem::detail::concat("all_gather(", dtype_name(dtype), ", ", count, " elements)");
    default:
      return tandem::detail::concat(collective_name(collective), "(", reduce_op_name(op), ", ",
                                    dtype_name(dtype), ", ", count, " elements)");
  }
}

bool Call::matches(const Call& other) const {
  if (collective != other.collective) return false;
  if (collective == Collective::barrier) return true;
  if (dtype != other.dtype || count != other.count) return false;
  if (collective == Collective::broadcast) return root == other.root;
  if (collective == Collective::all_gather) return true;
  return op == other.op;
}

std::array<int64_t, 12> Call::check_fields() const {
  const int64_t fields[6] = {static_cast<int64_t>(collective),
                             static_cast<int64_t>(dtype),
                             count,
                             static_cast<int64_t>(op),
                             root,
                             error.empty() ? 0 : 1};
  std::array<int64_t, 12> both{};
  for (int i = 0; i < 6; ++i) {
    both[i] = fields[i];
    both[6 + i] = -fields[i];
  }
  return both;
}

void Call::check_agreement(const std::array<int64_t, 12>& reduced, std::string_view backend,
                           int rank) const {
  if (!error.empty()) TANDEM_THROW(CommError, error);
  if (reduced[5] != 0) {
    TANDEM_THROW(CommError, "another ", backend, " rank made an invalid call; ", describe(),
                 " on rank ", rank, " abandoned");
  }
  static const char* const kNames[5] = {"collective", "dtype", "element count", "reduce op",
                                        "root"};
  for (int i = 0; i < 5; ++i) {
    const bool relevant = i == 0 || (collective != Collective::barrier &&
                                     (i != 3 || collective == Collective::all_reduce ||
                                      collective == Collective::reduce_scatter) &&
                                     (i != 4 || collective == Collective::broadcast));
    if (relevant && reduced[i] != -reduced[6 + i]) {
      TANDEM_THROW(CommError, "collective mismatch across ", backend, " ranks: the ", kNames[i],
                   " differs (rank ", rank, " called ", describe(), ")");
    }
  }
}

void Work::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [this] { return done_; })) {
    TANDEM_THROW(Timeout, "waiting for ", description_, " timed out after ", timeout.count(),
                 " ms");
  }
  if (error_) std::rethrow_exception(error_);
}

bool Work::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

namespace {
// The Work the calling communication thread is running (null elsewhere).
thread_local Work* running_work = nullptr;
}  // namespace

void Communicator::mark_all_ranks_arrived() {
  if (running_work != nullptr) running_work->start();
}

void Work::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  started_ = std::chrono::steady_clock::now();
}

std::chrono::steady_clock::time_point Work::started() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return started_;
}

std::chrono::steady_clock::time_point Work::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_;
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = std::move(error);
    finished_ = std::chrono::steady_clock::now();
  }
  cv_.notify_all();
}

WorkQueue::WorkQueue(std::string name)
    : thread_([this, name = std::move(name)] {
        trace::set_thread_name(name);
        loop();
      }) {}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void WorkQueue::push(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void WorkQueue::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return tasks_.empty() && !running_task_; });
}

void WorkQueue::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping with nothing left
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    running_task_ = true;
    lock.unlock();
    task();
    lock.lock();
    running_task_ = false;
    cv_.notify_all();
  }
}

Communicator::Communicator(CommOptions options) : options_(options) {}

Communicator::~Communicator() = default;

Call Communicator::make_call(Collective collective, const Tensor& input, const Tensor& output,
                             ReduceOp op, int root) const {
  Call call;
  call.collective = collective;
  call.op = op;
  call.root = root;
  call.input = input;
  call.output = output;
  if (collective == Collective::barrier) return call;
  auto invalid = [&](const std::string& reason) {
    call.error = tandem::detail::concat("rank ", rank(), ": invalid ", collective_name(collective),
                                        ": ", reason);
  };
  if (!input.defined() || !output.defined()) {
    invalid("undefined buffer");
    return call;
  }
  call.dtype = input.dtype();
  call.count = input.numel();
  if (!collective_dtype(input.dtype())) {
    invalid(tandem::detail::concat("dtype ", dtype_name(input.dtype()),
                                   " is not f32, bf16, f16 or i32"));
  } else if (input.dtype() != output.dtype()) {
    invalid(tandem::detail::concat("input is ", dtype_name(input.dtype()), " but output is ",
                                   dtype_name(output.dtype())));
  } else if (input.device().kind != output.device().kind ||
             (input.device().kind != DeviceKind::cpu && input.device() != output.device())) {
    invalid(tandem::detail::concat("input is on ", input.device().to_string(), " but output on ",
                                   output.device().to_string()));
  } else if (input.device().kind != DeviceKind::cpu && !takes_gpu_buffers()) {
    invalid(tandem::detail::concat("the ", backend(), " backend takes host buffers, not ",
                                   input.device().to_string()));
  } else if (collective == Collective::all_reduce && output.numel() != input.numel()) {
    invalid(
        tandem::detail::concat("output has ", output.numel(), " elements, input ", input.numel()));
  } else if (collective == Collective::reduce_scatter && input.numel() != output.numel() * size()) {
    invalid(tandem::detail::concat("input needs ", size(), " x ", output.numel(), " elements, has ",
                                   input.numel()));
  } else if (collective == Collective::all_gather && output.numel() != input.numel() * size()) {
    invalid(tandem::detail::concat("output needs ", size(), " x ", input.numel(), " elements, has ",
                                   output.numel()));
  } else if (collective == Collective::broadcast && (root < 0 || root >= size())) {
    invalid(tandem::detail::concat("root ", root, " is not a rank of a group of ", size()));
  } else if (op == ReduceOp::mean && input.dtype() == DType::i32 &&
             (collective == Collective::all_reduce || collective == Collective::reduce_scatter)) {
    invalid("mean of i32 is not defined (use sum)");
  }
  return call;
}

void Communicator::on_issue(const Call&) {}

void Communicator::run_now(const Call& call) {
  on_issue(call);
  drain();
  run(call);
}

void Communicator::all_reduce(const Tensor& input, const Tensor& output, ReduceOp op) {
  run_now(make_call(Collective::all_reduce, input, output, op, 0));
}

void Communicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  run_now(make_call(Collective::reduce_scatter, input, output, op, 0));
}

void Communicator::all_gather(const Tensor& input, const Tensor& output) {
  run_now(make_call(Collective::all_gather, input, output, ReduceOp::sum, 0));
}

void Communicator::broadcast(const Tensor& buffer, int root) {
  run_now(make_call(Collective::broadcast, buffer, buffer, ReduceOp::sum, root));
}

void Communicator::barrier() {
  run_now(make_call(Collective::barrier, {}, {}, ReduceOp::sum, 0));
}

std::shared_ptr<Work> Communicator::submit(Call call) {
  on_issue(call);
  auto work = std::make_shared<Work>();
  work->set_description(call.describe() + " on rank " + std::to_string(rank()));
  std::lock_guard<std::mutex> lock(queue_mutex_);
  if (!queue_) {
    queue_ = std::make_unique<WorkQueue>("communication (" + backend() + " rank " +
                                         std::to_string(rank()) + ")");
  }
  queue_->push([this, work, call = std::move(call)]() {
    work->start();
    running_work = work.get();
    trace::Span span(collective_name(call.collective).data(), "communication");
    if (call.input.defined()) span.set_arg("bytes", static_cast<int64_t>(call.input.nbytes()));
    try {
      run(call);
      running_work = nullptr;
      work->finish();
    } catch (...) {
      running_work = nullptr;
      work->finish(std::current_exception());
    }
  });
  return work;
}

void Communicator::drain() {
  WorkQueue* queue = nullptr;
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    queue = queue_.get();
  }
  if (queue) queue->drain();
}

std::shared_ptr<Work> Communicator::all_reduce_async(const Tensor& input, const Tensor& output,
                                                     ReduceOp op) {
  return submit(make_call(Collective::all_reduce, input, output, op, 0));
}

std::shared_ptr<Work> Communicator::reduce_scatter_async(const Tensor& input, const Tensor& output,
                                                         ReduceOp op) {
  return submit(make_call(Collective::reduce_scatter, input, output, op, 0));
}

std::shared_ptr<Work> Communicator::all_gather_async(const Tensor& input, const Tensor& output) {
  return submit(make_call(Collective::all_gather, input, output, ReduceOp::sum, 0));
}

std::shared_ptr<Work> Communicator::broadcast_async(const Tensor& buffer, int root) {
  return submit(make_call(Collective::broadcast, buffer, buffer, ReduceOp::sum, root));
}

}  // namespace tandem::comm
