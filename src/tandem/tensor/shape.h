#pragma once
// Tensor shapes: up to kMaxRank non-negative dimensions, stored inline so that
// building a shape on the hot path never allocates. A shape whose non-zero
// dimensions multiply past int64 cannot be built, so numel() never overflows.

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace tandem {

class Shape {
 public:
  static constexpr int kMaxRank = 8;

  Shape() = default;
  // Throws ShapeError for a negative dimension, more than kMaxRank of them, or
  // non-zero dimensions whose product exceeds INT64_MAX elements.
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims)
      : Shape(std::span<const int64_t>(dims.data(), dims.size())) {}

  int rank() const { return rank_; }
  // Dimension i; negative i counts from the end (-1 is the last).
  int64_t operator[](int i) const { return dims_[i < 0 ? i + rank_ : i]; }
  int64_t dim(int i) const;  // checked version of operator[]
  std::span<const int64_t> dims() const { return {dims_, static_cast<size_t>(rank_)}; }
  std::vector<int64_t> to_vector() const { return {dims_, dims_ + rank_}; }
  // Product of all dimensions (1 for rank 0).
  int64_t numel() const;
  // Product of the dimensions after the first (elements per batch row).
  int64_t row_numel() const;

  // The same shape with dimension i replaced (the checks of the constructor).
  Shape with_dim(int i, int64_t value) const;

  // "(128, 28, 28, 1)"
  std::string to_string() const;

  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  int64_t dims_[kMaxRank] = {};
  int rank_ = 0;
};

std::ostream& operator<<(std::ostream& out, const Shape& shape);

}  // namespace tandem
