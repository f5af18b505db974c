#pragma once
// The names of an enum's values, in one table: the value's name (flags,
// logs, files), parsing a name back with an error that lists the accepted
// ones, and the list itself (help texts, docs checks). Every user-facing
// enum goes through one, so a name is written once:
//
//   constexpr NameTable<Policy, 3> kPolicies{
//       "precision policy",
//       {{{Policy::float32, "float32"}, {Policy::mixed_bfloat16, "mixed_bfloat16"}, ...}}};
//
// A value may appear twice (an alias accepted when parsing); name() gives
// its first entry.

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "tandem/base/error.h"

namespace tandem {

template <typename E>
struct Named {
  E value;
  std::string_view name;
};

template <typename E, size_t N>
struct NameTable {
  std::string_view what;  // "strategy", "dtype": the errors' noun
  std::array<Named<E>, N> entries;

  std::string_view name(E value) const {
    for (const Named<E>& e : entries)
      if (e.value == value) return e.name;
    TANDEM_THROW(InvalidArgument, "invalid ", what, " value ", static_cast<long long>(value));
  }

  // Throws InvalidArgument naming `text` and the accepted names.
  E parse(std::string_view text) const {
    for (const Named<E>& e : entries)
      if (e.name == text) return e.value;
    TANDEM_THROW(InvalidArgument, "unknown ", what, " '", text, "' (expected ", choices(), ")");
  }

  // "a, b or c": each value's first name, in the table's order.
  std::string choices() const {
    std::string out;
    size_t listed = 0, count = 0;
    for (size_t i = 0; i < N; ++i) count += first(i) ? 1 : 0;
    for (size_t i = 0; i < N; ++i) {
      if (!first(i)) continue;
      if (listed > 0) out += listed + 1 == count ? " or " : ", ";
      out += entries[i].name;
      ++listed;
    }
    return out;
  }

 private:
  // Whether entry i is its value's first (not an alias).
  constexpr bool first(size_t i) const {
    for (size_t j = 0; j < i; ++j)
      if (entries[j].value == entries[i].value) return false;
    return true;
  }
};

}  // namespace tandem
