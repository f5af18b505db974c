#pragma once
// Reading a number from text that must be nothing else: flags, checkpoint
// metadata, store values, device indices. One rule everywhere: decimal
// digits with a leading '-' for signed types only (floating point: also a
// fraction, an exponent, inf and nan), no '+', no spaces, no trailing
// characters, and within T's range (std::stoll took "5x" for 5 and "-1"
// for 2^64 - 1 in an unsigned field).

#include <charconv>
#include <concepts>
#include <optional>
#include <string_view>

namespace tandem {

// The value when all of `text` is one number of T; nothing otherwise
// (empty, other characters, out of range).
template <typename T>
requires std::integral<T> || std::floating_point<T> std::optional<T> parse_number(
    std::string_view text) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end) return std::nullopt;
  return value;
}

}  // namespace tandem
