#include "tandem/data/element.h"

#include <cstring>

#include "tandem/base/error.h"

namespace tandem::data {

const Tensor& Element::at(const std::string& name) const {
  for (const auto& [n, t] : features_) {
    if (n == name) return t;
  }
  TANDEM_THROW(InvalidArgument, "element has no feature '", name, "' (it has ", describe(), ")");
}

Tensor& Element::at(const std::string& name) {
  return const_cast<Tensor&>(static_cast<const Element&>(*this).at(name));
}

bool Element::has(const std::string& name) const {
  for (const auto& [n, t] : features_) {
    if (n == name) return true;
  }
  return false;
}

void Element::set(const std::string& name, Tensor value) {
  for (auto& [n, t] : features_) {
    if (n == name) {
      t = std::move(value);
      return;
    }
  }
  features_.emplace_back(name, std::move(value));
}

std::string Element::describe() const {
  if (features_.empty()) return "no features";
  std::string out;
  for (const auto& [n, t] : features_) {
    if (!out.empty()) out += ", ";
    out += n + ": " + std::string(dtype_name(t.dtype())) + " " + t.shape().to_string();
  }
  return out;
}

Element on_device(const Element& element, Device device) {
  // Virtual CPU devices share the host's memory: a host tensor serves any.
  const auto usable = [&](const Tensor& t) {
    return t.device() == device ||
           (t.device().kind == DeviceKind::cpu && device.kind == DeviceKind::cpu);
  };
  bool all_there = true;
  for (const auto& [name, value] : element.features()) all_there &= usable(value);
  if (all_there) return element;
  Element moved;
  for (const auto& [name, value] : element.features()) {
    moved.set(name, usable(value) ? value : value.to(device));
  }
  return moved;
}

Tensor bytes_tensor(const std::string& bytes) {
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(bytes.size())}, DType::u8);
  if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

std::string tensor_bytes(const Tensor& tensor) {
  if (tensor.dtype() != DType::u8) {
    TANDEM_THROW(ShapeError, "expected a u8 byte tensor, got ", tensor.to_string());
  }
  return std::string(static_cast<const char*>(tensor.raw_data()), tensor.nbytes());
}

}  // namespace tandem::data
