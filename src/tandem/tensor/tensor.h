#pragma once
// Tensor: a dense, contiguous, row-major n-dimensional array on a Device.
// Copies are shallow (they share storage, as in PyTorch); views along the
// batch dimension (slice) and reshapes share storage too; clone() copies.
// Image tensors are channels-last, (N, H, W, C), as in TensorFlow.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tandem/tensor/allocator.h"
#include "tandem/tensor/device.h"
#include "tandem/tensor/dtype.h"
#include "tandem/tensor/shape.h"

namespace tandem {

// A block of device memory owned by its allocator (or borrowed from the caller).
class Storage {
 public:
  Storage(size_t bytes, Device device, MemoryCategory category);
  // Wraps memory the caller owns. `owner` (may be null) is released with the
  // storage: whatever keeps the memory alive (a numpy array, a DLPack
  // producer's tensor), so that the memory lives as long as any tensor on it.
  Storage(void* external, size_t bytes, Device device, std::shared_ptr<const void> owner = nullptr);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  MemoryCategory category() const { return category_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  MemoryCategory category_ = MemoryCategory::activations;
  Allocator* allocator_ = nullptr;     // null for external memory
  std::shared_ptr<const void> owner_;  // external memory's keeper (may be null)
};

class Tensor {
 public:
  Tensor() = default;  // undefined: holds no storage

  // The bytes a tensor of this shape and dtype holds. Throws ShapeError when
  // they exceed INT64_MAX (no allocation could hold them): readers call it
  // to check a size from a file before anything is allocated.
  static size_t checked_nbytes(const Shape& shape, DType dtype);

  // Uninitialised tensor. Throws ShapeError when the size overflows
  // (checked_nbytes), InvalidArgument on other bad arguments.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32,
                      Device device = current_device(),
                      MemoryCategory category = default_memory_category());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32,
                      Device device = current_device(),
                      MemoryCategory category = default_memory_category());
  // Every element set to value (converted to dtype).
  static Tensor full(const Shape& shape, float value, DType dtype = DType::f32,
                     Device device = current_device(),
                     MemoryCategory category = default_memory_category());
  // Copies values (as float, converted to dtype). values.size() must equal numel.
  static Tensor from_floats(const Shape& shape, std::span<const float> values,
                            DType dtype = DType::f32, Device device = current_device());
  static Tensor from_ints(const Shape& shape, std::span<const int32_t> values,
                          Device device = current_device());
  // A tensor over memory the caller keeps alive and unchanged while it is used.
  static Tensor wrap(void* data, const Shape& shape, DType dtype, Device device = current_device());
  // A tensor over memory that `owner` keeps alive: the owner is released
  // when the last tensor sharing the storage goes (zero-copy imports from
  // numpy and DLPack).
  static Tensor wrap(void* data, const Shape& shape, DType dtype, Device device,
                     std::shared_ptr<const void> owner);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const;
  MemoryCategory category() const;
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_.dim(i); }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  // The first element, in host memory: throws InvalidArgument for a tensor on
  // a GPU, so that host code (the CPU kernels) never reads device memory.
  void* raw_data() const;
  // The first element's address on the tensor's own device, whatever it is:
  // for copies between devices and the device's own kernels.
  void* device_data() const;
  // Typed host access (raw_data's check); throws ShapeError when T does not
  // match the dtype.
  template <typename T>
  T* data() const {
    check_element_type(sizeof(T), is_float_type<T>());
    return static_cast<T*>(raw_data());
  }

  // Rows [begin, end) of dimension 0, sharing storage.
  Tensor slice(int64_t begin, int64_t end) const;
  // The same elements under another shape (numel must match); shares storage.
  Tensor reshape(const Shape& shape) const;
  // A deep copy (in the given category; by default the same one).
  Tensor clone() const;
  Tensor clone(MemoryCategory category) const;
  // Copies other's elements into this tensor (same numel; dtype converted).
  void copy_from(const Tensor& other);
  // A converted copy; returns *this (shared) when the dtype already matches.
  Tensor to(DType dtype) const;
  // A copy on another device (same category); *this (shared) when already there.
  Tensor to(Device device) const;

  void fill(float value);
  void zero();

  // Elements converted to float / int (for tests, checkpoints and logs).
  std::vector<float> to_floats() const;
  std::vector<int32_t> to_ints() const;
  // The single element of a one-element tensor, as float.
  float item() const;
  // This tensor if it is on the CPU, else a copy on cpu:0 (to read on the host).
  Tensor on_host() const;

  bool shares_storage(const Tensor& other) const { return storage_ == other.storage_; }
  std::string to_string() const;  // "Tensor(f32, (2, 3), cpu:0)"

 private:
  template <typename T>
  static constexpr bool is_float_type() {
    return std::is_floating_point_v<T>;
  }
  void check_element_type(size_t element_size, bool floating) const;
  void check_defined(const char* what) const;

  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
};

}  // namespace tandem
