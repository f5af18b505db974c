#include "tandem/tensor/allocator.h"

#include <bit>
#include <cstdlib>
#include <map>

#include "tandem/base/error.h"
#include "tandem/tensor/device_memory.h"

namespace tandem {
namespace {

// Freed host blocks beyond this many bytes go back to the system instead of
// the cache. A GPU's cache is bounded by its memory instead: when cudaMalloc
// fails, the cache is released and the allocation tried once more.
constexpr int64_t kMaxCachedHostBytes = int64_t{2} << 30;

// The block size a request gets: the alignment below 64 KiB; above it, one
// of eight classes per power of two (at most 12.5% more), so that tensors of
// varying sizes (decoded images, the last batch of an epoch) reuse each
// other's cached blocks instead of each size filling the cache with blocks
// no later request fits. The tail beyond the request is never touched, so
// it costs address space, not resident memory.
size_t rounded_size(size_t bytes) {
  const size_t nonzero = bytes == 0 ? 1 : bytes;
  const size_t aligned =
      (nonzero + Allocator::kAlignment - 1) / Allocator::kAlignment * Allocator::kAlignment;
  if (aligned < (size_t{64} << 10)) return aligned;
  const size_t step = std::bit_floor(aligned) / 8;
  return (aligned + step - 1) / step * step;
}

thread_local MemoryCategory thread_default_category = MemoryCategory::activations;
thread_local AllocationBudget* thread_budget = nullptr;

}  // namespace

MemoryCategory default_memory_category() {
  return thread_default_category;
}

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory category)
    : previous_(thread_default_category) {
  thread_default_category = category;
}

MemoryCategoryScope::~MemoryCategoryScope() {
  thread_default_category = previous_;
}

std::string_view memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::parameters:
      return "parameters";
    case MemoryCategory::gradients:
      return "gradients";
    case MemoryCategory::optimizer_state:
      return "optimizer_state";
    case MemoryCategory::activations:
      return "activations";
    case MemoryCategory::workspace:
      return "workspace";
    case MemoryCategory::communication:
      return "communication";
    case MemoryCategory::input:
      return "input";
  }
  return "invalid";
}

AllocationBudget::AllocationBudget(int64_t bytes) : left_(bytes), enclosing_(thread_budget) {
  if (bytes < 0) TANDEM_THROW(InvalidArgument, "an allocation budget of ", bytes, " bytes");
  thread_budget = this;
}

AllocationBudget::~AllocationBudget() {
  thread_budget = enclosing_;
}

void AllocationBudget::charge(size_t bytes) {
  AllocationBudget* budget = thread_budget;
  if (budget == nullptr) return;
  if (bytes > static_cast<uint64_t>(budget->left_)) {
    TANDEM_THROW(Exceeded, "an allocation of ", bytes, " bytes exceeds the budget (", budget->left_,
                 " bytes left)");
  }
  budget->left_ -= static_cast<int64_t>(bytes);
}

Allocator::~Allocator() {
  release_cache();
}

void* Allocator::allocate(size_t bytes, MemoryCategory category) {
  AllocationBudget::charge(bytes);
  const size_t size = rounded_size(bytes);
  void* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_blocks_.find(size);
    if (it != free_blocks_.end() && !it->second.empty()) {
      block = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= static_cast<int64_t>(size);
    }
  }
  if (block != nullptr) {
    detail::device_reuse(device_, block);
  } else {
    block = detail::device_allocate(device_, size);
    if (block == nullptr) {
      release_cache();
      block = detail::device_allocate(device_, size);
    }
    if (block == nullptr) {
      TANDEM_THROW(Error, "out of memory: cannot allocate ", bytes, " bytes of ",
                   memory_category_name(category), " on ", device_.to_string());
    }
  }
  // Counted once the block exists: a request that failed raised the peak
  // and high-water figures (the memory plan's and the monitor's) for good.
  std::lock_guard<std::mutex> lock(mutex_);
  const int c = static_cast<int>(category);
  stats_.current_bytes[c] += static_cast<int64_t>(bytes);
  stats_.peak_bytes[c] = std::max(stats_.peak_bytes[c], stats_.current_bytes[c]);
  stats_.current_total_bytes += static_cast<int64_t>(bytes);
  stats_.peak_total_bytes = std::max(stats_.peak_total_bytes, stats_.current_total_bytes);
  stats_.high_water_bytes[c] = std::max(stats_.high_water_bytes[c], stats_.current_bytes[c]);
  stats_.high_water_total_bytes =
      std::max(stats_.high_water_total_bytes, stats_.current_total_bytes);
  ++stats_.allocation_count;
  return block;
}

void Allocator::deallocate(void* block, size_t bytes, MemoryCategory category) {
  if (block == nullptr) return;
  const size_t size = rounded_size(bytes);
  bool keep = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const int c = static_cast<int>(category);
    stats_.current_bytes[c] -= static_cast<int64_t>(bytes);
    stats_.current_total_bytes -= static_cast<int64_t>(bytes);
    if (device_.kind != DeviceKind::cpu ||
        stats_.cached_bytes + static_cast<int64_t>(size) <= kMaxCachedHostBytes) {
      detail::device_retire(device_, block);
      free_blocks_[size].push_back(block);
      stats_.cached_bytes += static_cast<int64_t>(size);
      keep = true;
    }
  }
  if (!keep) detail::device_release(device_, block);
}

MemoryStats Allocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void Allocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
  stats_.peak_total_bytes = stats_.current_total_bytes;
}

void Allocator::reset_high_water() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.high_water_bytes = stats_.current_bytes;
  stats_.high_water_total_bytes = stats_.current_total_bytes;
}

void Allocator::release_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, blocks] : free_blocks_) {
    for (void* block : blocks) detail::device_release(device_, block);
  }
  free_blocks_.clear();
  stats_.cached_bytes = 0;
}

Allocator& allocator_for(Device device) {
  static std::mutex registry_mutex;
  // Never destroyed: tensors in static storage may outlive main().
  static auto* registry = new std::map<std::pair<int, int>, std::unique_ptr<Allocator>>();
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto& slot = (*registry)[{static_cast<int>(device.kind), device.index}];
  if (!slot) slot = std::make_unique<Allocator>(device);
  return *slot;
}

}  // namespace tandem
