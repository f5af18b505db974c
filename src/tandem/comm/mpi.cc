#include "tandem/comm/mpi.h"

#include <climits>
#include <cstdlib>

#include "tandem/base/error.h"
#include "tandem/config.h"

#if TANDEM_HAVE_MPI
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "tandem/comm/detail/reduce_kernels.h"
#include "tandem/tensor/convert.h"
#endif

namespace tandem::comm {

bool mpi_built() {
  return TANDEM_HAVE_MPI == 1;
}

bool launched_by_mpi() {
  for (const char* variable :
       {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

int launched_process_count() {
  if (!launched_by_mpi()) return 0;
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* value = std::getenv(variable);
    if (value == nullptr) continue;
    char* end = nullptr;
    const long count = std::strtol(value, &end, 10);
    if (end != value && *end == '\0' && count >= 1 && count <= INT_MAX)
      return static_cast<int>(count);
  }
  return -1;
}

#if !TANDEM_HAVE_MPI

int mpi_world_rank() {
  TANDEM_THROW(NotImplemented, "this build has no MPI backend (TANDEM_WITH_MPI=OFF)");
}
int mpi_world_size() {
  TANDEM_THROW(NotImplemented, "this build has no MPI backend (TANDEM_WITH_MPI=OFF)");
}
std::unique_ptr<Communicator> make_mpi_communicator(CommOptions) {
  TANDEM_THROW(NotImplemented, "this build has no MPI backend (TANDEM_WITH_MPI=OFF)");
}

#else

namespace {

void check_mpi(int status, const char* what) {
  if (status == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, message, &length);
  TANDEM_THROW(CommError, "MPI ", what,
               " failed: ", std::string(message, static_cast<size_t>(length)));
}

// bf16/f16 reductions: each pairwise combination in float32, rounded once.
template <float (*Load)(uint16_t), uint16_t (*Store)(float), int Kind>
void combine_half(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = Load(a[i]), y = Load(b[i]);
    b[i] = Store(Kind == 0 ? x + y : Kind == 1 ? std::max(x, y) : std::min(x, y));
  }
}

struct MpiRuntime {
  MPI_Datatype half = MPI_DATATYPE_NULL;                         // 2 opaque bytes
  MPI_Op bf16_ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum, max, min
  MPI_Op f16_ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

MpiRuntime& runtime() {
  static std::once_flag once;
  static MpiRuntime rt;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
                "MPI_Init_thread");
      std::atexit(finalize_at_exit);
      if (provided < MPI_THREAD_MULTIPLE) {
        TANDEM_THROW(CommError, "the MPI library provides thread level ", provided,
                     ", tandem needs MPI_THREAD_MULTIPLE");
      }
    }
    check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &rt.half), "MPI_Type_contiguous");
    check_mpi(MPI_Type_commit(&rt.half), "MPI_Type_commit");
    MPI_Op_create(&combine_half<bf16_to_float, float_to_bf16, 0>, 1, &rt.bf16_ops[0]);
    MPI_Op_create(&combine_half<bf16_to_float, float_to_bf16, 1>, 1, &rt.bf16_ops[1]);
    MPI_Op_create(&combine_half<bf16_to_float, float_to_bf16, 2>, 1, &rt.bf16_ops[2]);
    MPI_Op_create(&combine_half<f16_to_float, float_to_f16, 0>, 1, &rt.f16_ops[0]);
    MPI_Op_create(&combine_half<f16_to_float, float_to_f16, 1>, 1, &rt.f16_ops[1]);
    MPI_Op_create(&combine_half<f16_to_float, float_to_f16, 2>, 1, &rt.f16_ops[2]);
  });
  return rt;
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT;
    default:
      return runtime().half;
  }
}

MPI_Op mpi_op(DType dtype, ReduceOp op) {
  const int index = op == ReduceOp::max ? 1 : op == ReduceOp::min ? 2 : 0;
  if (dtype == DType::bf16) return runtime().bf16_ops[index];
  if (dtype == DType::f16) return runtime().f16_ops[index];
  return index == 1 ? MPI_MAX : index == 2 ? MPI_MIN : MPI_SUM;
}

// Multiplies a buffer by scale in place (the mean after a sum).
void scale_in_place(const Tensor& t, float scale) {
  const void* in = t.raw_data();
  void* out = t.raw_data();
  kernels::reduce_range(t.dtype(), ReduceOp::sum, scale, &in, 1, &out, 1, 0, t.numel());
}

// MPI counts are int: larger buffers go in pieces.
constexpr int64_t kMaxPiece = int64_t{1} << 30;

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(CommOptions options) : Communicator(options) {
    runtime();
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    drain();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  std::string_view all_reduce_algorithm(int64_t) const override { return "MPI_Allreduce"; }

 protected:
  void run(const Call& call) override;

 private:
  void verify(const Call& call);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

void MpiCommunicator::verify(const Call& call) {
  // One MPI_MAX over (x, -x) gives every field's maximum and minimum.
  const int64_t fields[6] = {static_cast<int64_t>(call.collective),
                             static_cast<int64_t>(call.dtype),
                             call.count,
                             static_cast<int64_t>(call.op),
                             call.root,
                             call.error.empty() ? 0 : 1};
  int64_t both[12];
  for (int i = 0; i < 6; ++i) {
    both[i] = fields[i];
    both[6 + i] = -fields[i];
  }
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, both, 12, MPI_INT64_T, MPI_MAX, comm_),
            "MPI_Allreduce (call check)");
  if (!call.error.empty()) TANDEM_THROW(CommError, call.error);
  if (both[5] != 0) {
    TANDEM_THROW(CommError, "another MPI rank made an invalid call; ", call.describe(), " on rank ",
                 rank_, " abandoned");
  }
  static const char* const kNames[5] = {"collective", "dtype", "element count", "reduce op",
                                        "root"};
  for (int i = 0; i < 5; ++i) {
    const bool relevant = i == 0 || (call.collective != Collective::barrier &&
                                     (i != 3 || call.collective == Collective::all_reduce ||
                                      call.collective == Collective::reduce_scatter) &&
                                     (i != 4 || call.collective == Collective::broadcast));
    if (relevant && both[i] != -both[6 + i]) {
      TANDEM_THROW(CommError, "collective mismatch across MPI ranks: the ", kNames[i],
                   " differs (rank ", rank_, " called ", call.describe(), ")");
    }
  }
}

void MpiCommunicator::run(const Call& call) {
  if (options().verify_calls || !call.error.empty()) {
    verify(call);
    // The check is an all-reduce: every rank has arrived once it returns.
    mark_all_ranks_arrived();
  }
  const MPI_Datatype type = mpi_type(call.dtype);
  const size_t element = dtype_size(call.dtype);
  switch (call.collective) {
    case Collective::barrier:
      check_mpi(MPI_Barrier(comm_), "MPI_Barrier");
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
        check_mpi(MPI_Allreduce(in, out, n, type, op, comm_), "MPI_Allreduce");
      }
      if (call.op == ReduceOp::mean) scale_in_place(call.output, 1.0f / static_cast<float>(size_));
      return;
    }
    case Collective::reduce_scatter: {
      const int64_t segment = call.count / size_;
      if (segment > kMaxPiece)
        TANDEM_THROW(NotImplemented, "reduce_scatter segments over 2^30 elements");
      if (segment > 0) {
        check_mpi(MPI_Reduce_scatter_block(call.input.raw_data(), call.output.raw_data(),
                                           static_cast<int>(segment), type,
                                           mpi_op(call.dtype, call.op), comm_),
                  "MPI_Reduce_scatter_block");
      }
      if (call.op == ReduceOp::mean) scale_in_place(call.output, 1.0f / static_cast<float>(size_));
      return;
    }
    case Collective::all_gather:
      if (call.count > kMaxPiece)
        TANDEM_THROW(NotImplemented, "all_gather inputs over 2^30 elements");
      check_mpi(MPI_Allgather(call.input.raw_data(), static_cast<int>(call.count), type,
                              call.output.raw_data(), static_cast<int>(call.count), type, comm_),
                "MPI_Allgather");
      return;
    case Collective::broadcast:
      for (int64_t begin = 0; begin < call.count; begin += kMaxPiece) {
        const int n = static_cast<int>(std::min(kMaxPiece, call.count - begin));
        check_mpi(MPI_Bcast(static_cast<char*>(call.output.raw_data()) + begin * element, n, type,
                            call.root, comm_),
                  "MPI_Bcast");
      }
      return;
  }
}

}  // namespace

int mpi_world_rank() {
  runtime();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int mpi_world_size() {
  runtime();
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

std::unique_ptr<Communicator> make_mpi_communicator(CommOptions options) {
  return std::make_unique<MpiCommunicator>(options);
}

#endif

}  // namespace tandem::comm
