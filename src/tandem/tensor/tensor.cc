#include "tandem/tensor/tensor.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "tandem/base/error.h"
#include "tandem/tensor/convert.h"
#include "tandem/tensor/device_memory.h"

namespace tandem {

Storage::Storage(size_t bytes, Device device, MemoryCategory category)
    : bytes_(bytes), device_(device), category_(category), allocator_(&allocator_for(device)) {
  data_ = allocator_->allocate(bytes, category);
}

Storage::Storage(void* external, size_t bytes, Device device, std::shared_ptr<const void> owner)
    : data_(external), bytes_(bytes), device_(device), owner_(std::move(owner)) {}

Storage::~Storage() {
  if (allocator_ != nullptr) allocator_->deallocate(data_, bytes_, category_);
}

size_t Tensor::checked_nbytes(const Shape& shape, DType dtype) {
  const int64_t numel = shape.numel();
  const auto element = static_cast<int64_t>(dtype_size(dtype));
  int64_t bytes = 0;
  // INT64_MAX is PTRDIFF_MAX here: no allocation can be larger.
  if (__builtin_mul_overflow(numel, element, &bytes)) {
    TANDEM_THROW(ShapeError, "a ", dtype_name(dtype), " tensor of shape ", shape.to_string(),
                 " would need ", numel, " x ", element, " bytes, more than INT64_MAX");
  }
  return static_cast<size_t>(bytes);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, MemoryCategory category) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(checked_nbytes(shape, dtype), device, category);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device, MemoryCategory category) {
  Tensor t = empty(shape, dtype, device, category);
  t.zero();
  return t;
}

Tensor Tensor::full(const Shape& shape, float value, DType dtype, Device device,
                    MemoryCategory category) {
  Tensor t = empty(shape, dtype, device, category);
  t.fill(value);
  return t;
}

Tensor Tensor::from_floats(const Shape& shape, std::span<const float> values, DType dtype,
                           Device device) {
  if (static_cast<int64_t>(values.size()) != shape.numel()) {
    TANDEM_THROW(ShapeError, "from_floats: ", values.size(), " values for shape ",
                 shape.to_string(), " (", shape.numel(), " elements)");
  }
  if (device.kind != DeviceKind::cpu) return from_floats(shape, values, dtype).to(device);
  Tensor t = empty(shape, dtype, device);
  convert(values.data(), DType::f32, t.raw_data(), dtype, shape.numel());
  return t;
}

Tensor Tensor::from_ints(const Shape& shape, std::span<const int32_t> values, Device device) {
  if (static_cast<int64_t>(values.size()) != shape.numel()) {
    TANDEM_THROW(ShapeError, "from_ints: ", values.size(), " values for shape ", shape.to_string(),
                 " (", shape.numel(), " elements)");
  }
  Tensor t = empty(shape, DType::i32, device);
  detail::device_copy(t.device_data(), device, values.data(), cpu_device(), t.nbytes());
  return t;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, Device device) {
  return wrap(data, shape, dtype, device, nullptr);
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, Device device,
                    std::shared_ptr<const void> owner) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ =
      std::make_shared<Storage>(data, checked_nbytes(shape, dtype), device, std::move(owner));
  return t;
}

Device Tensor::device() const {
  check_defined("device");
  return storage_->device();
}

MemoryCategory Tensor::category() const {
  check_defined("category");
  return storage_->category();
}

void* Tensor::raw_data() const {
  check_defined("data");
  if (storage_->device().kind != DeviceKind::cpu) {
    TANDEM_THROW(InvalidArgument, "host code was given a tensor on ",
                 storage_->device().to_string(),
                 ": this operation has no kernel for that device yet (copy the tensor to the CPU "
                 "with to(cpu_device()) first)");
  }
  return static_cast<char*>(storage_->data()) + offset_bytes_;
}

void* Tensor::device_data() const {
  check_defined("data");
  return static_cast<char*>(storage_->data()) + offset_bytes_;
}

void Tensor::check_defined(const char* what) const {
  if (!storage_) TANDEM_THROW(Error, "Tensor::", what, " on an undefined tensor");
}

void Tensor::check_element_type(size_t element_size, bool floating) const {
  const bool ok = floating ? (dtype_ == DType::f32 && element_size == 4)
                           : (dtype_size(dtype_) == element_size && !(dtype_ == DType::f32));
  if (!ok) {
    TANDEM_THROW(ShapeError, "Tensor::data: element type of size ", element_size,
                 floating ? " (floating)" : " (integer)", " does not match dtype ",
                 dtype_name(dtype_));
  }
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  check_defined("slice");
  if (shape_.rank() == 0) TANDEM_THROW(ShapeError, "slice of a rank-0 tensor");
  if (begin < 0 || end < begin || end > shape_[0]) {
    TANDEM_THROW(ShapeError, "slice [", begin, ", ", end, ") out of range for shape ",
                 shape_.to_string());
  }
  Tensor view = *this;
  view.offset_bytes_ += static_cast<size_t>(begin * shape_.row_numel()) * dtype_size(dtype_);
  view.shape_ = shape_.with_dim(0, end - begin);
  return view;
}

Tensor Tensor::reshape(const Shape& shape) const {
  check_defined("reshape");
  if (shape.numel() != numel()) {
    TANDEM_THROW(ShapeError, "cannot reshape ", shape_.to_string(), " (", numel(), " elements) to ",
                 shape.to_string(), " (", shape.numel(), " elements)");
  }
  Tensor view = *this;
  view.shape_ = shape;
  return view;
}

Tensor Tensor::clone() const {
  return clone(category());
}

Tensor Tensor::clone(MemoryCategory category) const {
  Tensor copy = empty(shape_, dtype_, device(), category);
  detail::device_copy(copy.device_data(), device(), device_data(), device(), nbytes());
  return copy;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor copy = empty(shape_, dtype_, target, category());
  detail::device_copy(copy.device_data(), target, device_data(), device(), nbytes());
  return copy;
}

void Tensor::copy_from(const Tensor& other) {
  if (other.numel() != numel()) {
    TANDEM_THROW(ShapeError, "copy_from: source ", other.shape().to_string(), " and destination ",
                 shape_.to_string(), " differ in element count");
  }
  if (other.device() == device()) {
    detail::device_convert(other.device_data(), other.dtype(), device_data(), dtype_, numel(),
                           device());
  } else if (other.dtype() == dtype_) {
    detail::device_copy(device_data(), device(), other.device_data(), other.device(), nbytes());
  } else {
    copy_from(other.to(device()));  // across devices first, then converted
  }
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor out = empty(shape_, dtype, device(), category());
  detail::device_convert(device_data(), dtype_, out.device_data(), dtype, numel(), device());
  return out;
}

void Tensor::fill(float value) {
  detail::device_fill(device_data(), dtype_, value, numel(), device());
}

void Tensor::zero() {
  fill(0.0f);
}

Tensor Tensor::on_host() const {
  return device().kind == DeviceKind::cpu ? *this : to(cpu_device());
}

std::vector<float> Tensor::to_floats() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  if (!out.empty()) convert(on_host().raw_data(), dtype_, out.data(), DType::f32, numel());
  return out;
}

std::vector<int32_t> Tensor::to_ints() const {
  std::vector<int32_t> out(static_cast<size_t>(numel()));
  if (!out.empty()) convert(on_host().raw_data(), dtype_, out.data(), DType::i32, numel());
  return out;
}

float Tensor::item() const {
  if (numel() != 1) {
    TANDEM_THROW(ShapeError, "item() needs a one-element tensor, got shape ", shape_.to_string());
  }
  float value = 0.0f;
  convert(on_host().raw_data(), dtype_, &value, DType::f32, 1);
  return value;
}

std::string Tensor::to_string() const {
  if (!defined()) return "Tensor(undefined)";
  return "Tensor(" + std::string(dtype_name(dtype_)) + ", " + shape_.to_string() + ", " +
         device().to_string() + ")";
}

}  // namespace tandem
