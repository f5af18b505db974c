#pragma once
// Private glue between tandem tensors and oneDNN 2.6: the engine, a stream per
// thread, a cache of primitives keyed by (op, shapes, dtypes, attributes), and
// execution with a user-managed scratchpad taken from the device's allocator
// (so primitives can run concurrently on several replica threads and their
// workspace shows up in the memory accounting).

#include <dnnl.hpp>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "tandem/base/error.h"
#include "tandem/kernels/activation.h"
#include "tandem/tensor/tensor.h"

namespace tandem::kernels::detail {

dnnl::engine& cpu_engine();
dnnl::stream& thread_stream();

dnnl::memory::data_type to_dnnl(DType dtype);
dnnl::memory::dims to_dims(const Shape& shape);

// A memory object over a tensor's data with the given descriptor.
dnnl::memory memory_of(const Tensor& tensor, const dnnl::memory::desc& desc);

// Whether oneDNN runs bf16 primitives on this CPU: oneDNN 2.6 has them from
// AVX-512 (avx512_core, emulating bf16 arithmetic; natively with AVX512-BF16
// or AMX) and not at all on AVX2-only CPUs. Without them the kernels compute
// on the bf16 values widened to f32 (exact) and round their bf16 outputs:
// the same f32 accumulation as oneDNN's bf16 kernels, at f32 speed.
bool onednn_runs_bf16();
// True when x is bf16 and oneDNN cannot take it: the caller widens it.
bool needs_bf16_widening(const Tensor& x);
// x as f32 in the workspace category (it lives for one kernel call, and is
// not one of the model's stored activations).
Tensor widened(const Tensor& x);
// A widened computation's f32 result as `dtype`, in the calling scope's
// memory category (the category the kernel's output would have had).
Tensor narrowed(const Tensor& result, DType dtype);

// A primitive attribute with the user scratchpad mode set.
dnnl::primitive_attr user_scratchpad_attr();

// Returns the cached object for key, creating it with make() on a miss.
// Thread-safe; least-recently-used entries are evicted past a capacity.
std::shared_ptr<void> cache_lookup(const std::string& key,
                                   const std::function<std::shared_ptr<void>()>& make);

template <typename T>
std::shared_ptr<T> cached(const std::string& key, const std::function<std::shared_ptr<T>()>& make) {
  return std::static_pointer_cast<T>(
      cache_lookup(key, [&]() -> std::shared_ptr<void> { return make(); }));
}

// Number of entries in the primitive cache (for tests).
size_t cache_size();

// The post-op that applies activation (not none) to a matmul's or a
// convolution's result.
dnnl::post_ops activation_post_op(Activation activation);

// Runs a primitive on the calling thread's stream, giving it a scratchpad of
// scratchpad_desc's size from the device's allocator, and waits for it.
void execute(const dnnl::primitive& primitive, const dnnl::memory::desc& scratchpad_desc,
             std::unordered_map<int, dnnl::memory> args, Device device);

// Runs fn, rethrowing a dnnl::error as tandem::Error naming the operation.
template <typename Fn>
auto guarded(const std::string& operation, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    TANDEM_THROW(Error, "oneDNN ", operation, " failed: ", e.what(), " (status ",
                 static_cast<int>(e.status), ")");
  }
}

// Key fragment describing a tensor's shape and dtype: "f32(2,3)".
std::string key_of(const Tensor& tensor);

}  // namespace tandem::kernels::detail
