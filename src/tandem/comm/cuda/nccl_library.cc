#include "tandem/comm/cuda/nccl_library.h"

#include "tandem/base/error.h"
#include "tandem/base/shared_library.h"

namespace tandem::cuda {

const Nccl& nccl() {
  static LazyLibrary<Nccl> library(
      "NCCL", {"libnccl.so.2", "libnccl.so"}, [](void* handle, const char* file, Nccl& t) {
        bind_symbol(handle, file, "ncclGetUniqueId", t.get_unique_id);
        bind_symbol(handle, file, "ncclCommInitRank", t.comm_init_rank);
        bind_symbol(handle, file, "ncclCommInitAll", t.comm_init_all);
        bind_symbol(handle, file, "ncclCommDestroy", t.comm_destroy);
        bind_symbol(handle, file, "ncclCommAbort", t.comm_abort);
        bind_symbol(handle, file, "ncclCommGetAsyncError", t.comm_get_async_error);
        bind_symbol(handle, file, "ncclGetErrorString", t.error_string);
        bind_symbol(handle, file, "ncclAllReduce", t.all_reduce);
        bind_symbol(handle, file, "ncclReduceScatter", t.reduce_scatter);
        bind_symbol(handle, file, "ncclAllGather", t.all_gather);
        bind_symbol(handle, file, "ncclBroadcast", t.broadcast);
      });
  return library.get();
}

std::string nccl_version() {
  void* h = open_shared_library({"libnccl.so.2", "libnccl.so"});
  if (h == nullptr) return "not found";
  try {
    int (*get)(int*) = nullptr;
    bind_symbol(h, "libnccl", "ncclGetVersion", get);
    int v = 0;
    return get(&v) == 0 ? dotted_version(static_cast<size_t>(v)) : "not found";
  } catch (const Error&) {
    return "not found";
  }
}

}  // namespace tandem::cuda
