#pragma once
// Per-device memory: 64-byte aligned blocks, accounted by category with current
// and peak figures, and a cache of freed blocks so that a training step's
// repeated allocations do not page-fault fresh memory every time.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tandem/base/error.h"
#include "tandem/tensor/device.h"

namespace tandem {

enum class MemoryCategory : uint8_t {
  parameters,
  gradients,
  optimizer_state,
  activations,
  workspace,
  communication,
  input,  // data the input pipeline holds: loaded datasets, assembled batches
};
inline constexpr int kMemoryCategoryCount = 7;

std::string_view memory_category_name(MemoryCategory category);

// Byte counts (requested sizes, not rounded) for one device.
struct MemoryStats {
  std::array<int64_t, kMemoryCategoryCount> current_bytes{};
  std::array<int64_t, kMemoryCategoryCount> peak_bytes{};
  int64_t current_total_bytes = 0;
  int64_t peak_total_bytes = 0;
  // Like the peaks, but reset only by reset_high_water(): run-long figures
  // while the monitor restarts the peaks every epoch (the memory plan's
  // measured side).
  std::array<int64_t, kMemoryCategoryCount> high_water_bytes{};
  int64_t high_water_total_bytes = 0;
  int64_t cached_bytes = 0;      // freed blocks held for reuse
  int64_t allocation_count = 0;  // calls to allocate()

  int64_t current(MemoryCategory c) const { return current_bytes[static_cast<int>(c)]; }
  int64_t peak(MemoryCategory c) const { return peak_bytes[static_cast<int>(c)]; }
};

class Allocator {
 public:
  static constexpr size_t kAlignment = 64;

  explicit Allocator(Device device) : device_(device) {}
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Returns a kAlignment-aligned block of at least `bytes` bytes (non-null even
  // for 0). Thread-safe. Throws Error when the system is out of memory.
  void* allocate(size_t bytes, MemoryCategory category);
  // Returns a block from allocate() with the same size and category.
  void deallocate(void* block, size_t bytes, MemoryCategory category);

  MemoryStats stats() const;
  // Sets every peak to the current value (e.g. at the start of a step).
  void reset_peaks();
  // Sets the high-water marks to the current values.
  void reset_high_water();
  // Frees the cached blocks.
  void release_cache();

  Device device() const { return device_; }

 private:
  Device device_;
  mutable std::mutex mutex_;
  MemoryStats stats_;
  std::unordered_map<size_t, std::vector<void*>> free_blocks_;  // by rounded size
};

// The allocator of a device; created on first use, lives for the process.
Allocator& allocator_for(Device device);

// The category of new tensors that name none: activations, unless a
// MemoryCategoryScope on this thread says otherwise (the input pipeline
// marks its threads and calls so that datasets and batches count as input).
MemoryCategory default_memory_category();

class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory category);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory previous_;
};

// Bounds what this thread allocates while the budget lives, over every
// device: an allocation that would take the bytes allocated since its start
// past `bytes` throws AllocationBudget::Exceeded (nothing is allocated).
// For building something whose size comes from an untrusted file (a
// checkpoint's model settings), whose legitimate size the file itself
// bounds. Budgets nest; the innermost one counts.
class AllocationBudget {
 public:
  class Exceeded : public Error {
   public:
    using Error::Error;
  };

  explicit AllocationBudget(int64_t bytes);
  ~AllocationBudget();
  AllocationBudget(const AllocationBudget&) = delete;
  AllocationBudget& operator=(const AllocationBudget&) = delete;

  // Called by Allocator::allocate on the allocating thread.
  static void charge(size_t bytes);

 private:
  int64_t left_;
  AllocationBudget* enclosing_;
};

}  // namespace tandem
