#include "tandem/tensor/shape.h"

#include <algorithm>
#include <ostream>
#include <string>

#include "tandem/base/error.h"

namespace tandem {
namespace {

// Throws ShapeError when the non-zero dimensions multiply past INT64_MAX: a
// shape holding them could not report its element count (or row count).
void check_element_count(const int64_t* dims, int rank) {
  int64_t product = 1;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] != 0 && __builtin_mul_overflow(product, dims[i], &product)) {
      std::string text;
      for (int k = 0; k < rank; ++k) text += (k > 0 ? " x " : "") + std::to_string(dims[k]);
      TANDEM_THROW(ShapeError, "shape ", text, " has more than INT64_MAX (2^63 - 1) elements");
    }
  }
}

}  // namespace

Shape::Shape(std::initializer_list<int64_t> dims)
    : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  if (dims.size() > static_cast<size_t>(kMaxRank)) {
    TANDEM_THROW(ShapeError, "shape of rank ", dims.size(), " exceeds the maximum rank ", kMaxRank);
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) TANDEM_THROW(ShapeError, "negative dimension ", dims[i], " at index ", i);
    dims_[i] = dims[i];
  }
  rank_ = static_cast<int>(dims.size());
  check_element_count(dims_, rank_);
}

int64_t Shape::dim(int i) const {
  const int index = i < 0 ? i + rank_ : i;
  if (index < 0 || index >= rank_) {
    TANDEM_THROW(ShapeError, "dimension ", i, " out of range for shape ", to_string());
  }
  return dims_[index];
}

// The constructor's check keeps every partial product below INT64_MAX.
int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

int64_t Shape::row_numel() const {
  int64_t n = 1;
  for (int i = 1; i < rank_; ++i) n *= dims_[i];
  return n;
}

Shape Shape::with_dim(int i, int64_t value) const {
  Shape copy = *this;
  const int index = i < 0 ? i + rank_ : i;
  if (index < 0 || index >= rank_) {
    TANDEM_THROW(ShapeError, "dimension ", i, " out of range for shape ", to_string());
  }
  if (value < 0) TANDEM_THROW(ShapeError, "negative dimension ", value);
  copy.dims_[index] = value;
  check_element_count(copy.dims_, copy.rank_);
  return copy;
}

std::string Shape::to_string() const {
  std::string out = "(";
  for (int i = 0; i < rank_; ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(dims_[i]);
  }
  if (rank_ == 1) out += ",";
  return out + ")";
}

bool Shape::operator==(const Shape& other) const {
  return rank_ == other.rank_ && std::equal(dims_, dims_ + rank_, other.dims_);
}

std::ostream& operator<<(std::ostream& out, const Shape& shape) {
  return out << shape.to_string();
}

}  // namespace tandem
