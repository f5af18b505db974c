#include "tandem/kernels/detail/onednn.h"

#include <list>
#include <mutex>

#include "tandem/base/parallel.h"

namespace tandem::kernels::detail {
namespace {

constexpr size_t kCacheCapacity = 2048;

struct PrimitiveCache {
  std::mutex mutex;
  // Most recently used first.
  std::list<std::pair<std::string, std::shared_ptr<void>>> entries;
  std::unordered_map<std::string, decltype(entries)::iterator> index;
};

PrimitiveCache& primitive_cache() {
  static auto* cache = new PrimitiveCache();  // never destroyed: used until exit
  return *cache;
}

}  // namespace

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

dnnl::memory::data_type to_dnnl(DType dtype) {
  using dt = dnnl::memory::data_type;
  switch (dtype) {
    case DType::f32:
      return dt::f32;
    case DType::bf16:
      return dt::bf16;
    case DType::f16:
      return dt::f16;
    case DType::i32:
      return dt::s32;
    case DType::u8:
      return dt::u8;
    case DType::i64:
      break;  // no oneDNN primitive takes it; kernels refuse it by name first
  }
  return dt::undef;
}

dnnl::memory::dims to_dims(const Shape& shape) {
  return dnnl::memory::dims(shape.dims().begin(), shape.dims().end());
}

dnnl::memory memory_of(const Tensor& tensor, const dnnl::memory::desc& desc) {
  return dnnl::memory(desc, cpu_engine(), tensor.raw_data());
}

bool onednn_runs_bf16() {
  static const bool runs = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto avx512_core = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
    return (isa & avx512_core) == avx512_core;  // the ISA values are nested bit masks
  }();
  return runs;
}

bool needs_bf16_widening(const Tensor& x) {
  return x.dtype() == DType::bf16 && !onednn_runs_bf16();
}

Tensor widened(const Tensor& x) {
  Tensor wide = Tensor::empty(x.shape(), DType::f32, x.device(), MemoryCategory::workspace);
  wide.copy_from(x);
  return wide;
}

Tensor narrowed(const Tensor& result, DType dtype) {
  Tensor out = Tensor::empty(result.shape(), dtype, result.device());
  out.copy_from(result);
  return out;
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

std::shared_ptr<void> cache_lookup(const std::string& op_key,
                                   const std::function<std::shared_ptr<void>()>& make) {
  // oneDNN fixes a primitive's work split for the thread count at creation
  // (its own cache keys on it too): a primitive built on a 1-thread replica
  // would run on one thread inside a 2-thread team.
  const std::string key = tandem::detail::concat(op_key, "|threads=", num_threads());
  PrimitiveCache& cache = primitive_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.index.find(key);
    if (it != cache.index.end()) {
      cache.entries.splice(cache.entries.begin(), cache.entries, it->second);
      return it->second->second;
    }
  }
  // Build outside the lock: primitive creation can take milliseconds. Two
  // threads may build the same entry; the first one inserted wins.
  std::shared_ptr<void> value = make();
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto it = cache.index.find(key);
  if (it != cache.index.end()) return it->second->second;
  cache.entries.emplace_front(key, value);
  cache.index[key] = cache.entries.begin();
  if (cache.entries.size() > kCacheCapacity) {
    cache.index.erase(cache.entries.back().first);
    cache.entries.pop_back();
  }
  return value;
}

size_t cache_size() {
  PrimitiveCache& cache = primitive_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.entries.size();
}

void execute(const dnnl::primitive& primitive, const dnnl::memory::desc& scratchpad_desc,
             std::unordered_map<int, dnnl::memory> args, Device device) {
  Tensor scratchpad;
  const size_t scratch_bytes = scratchpad_desc.get_size();
  if (scratch_bytes > 0) {
    // oneDNN 2.6's AVX2 convolutions with few channels (resnet width=4)
    // write a few bytes past the scratchpad they book (valgrind: up to 20
    // past 3,264), corrupting the heap; the slack absorbs that.
    constexpr size_t kSlack = 4096;
    scratchpad = Tensor::empty(Shape{static_cast<int64_t>(scratch_bytes + kSlack)}, DType::u8,
                               device, MemoryCategory::workspace);
    args.emplace(DNNL_ARG_SCRATCHPAD, memory_of(scratchpad, scratchpad_desc));
  }
  dnnl::stream& stream = thread_stream();
  primitive.execute(stream, args);
  stream.wait();
}

std::string key_of(const Tensor& tensor) {
  return std::string(dtype_name(tensor.dtype())) + tensor.shape().to_string();
}

dnnl::post_ops activation_post_op(Activation activation) {
  dnnl::algorithm algorithm = dnnl::algorithm::eltwise_gelu_erf;
  float alpha = 0.0f;
  switch (activation) {
    case Activation::relu:
      algorithm = dnnl::algorithm::eltwise_relu;
      break;
    case Activation::gelu_tanh:
      algorithm = dnnl::algorithm::eltwise_gelu_tanh;
      break;
    case Activation::silu:
      algorithm = dnnl::algorithm::eltwise_swish;
      alpha = 1.0f;  // the slope inside the sigmoid
      break;
    case Activation::none:
    case Activation::gelu:
      break;
  }
  dnnl::post_ops ops;
  ops.append_eltwise(1.0f, algorithm, alpha, 0.0f);
  return ops;
}

}  // namespace tandem::kernels::detail
