#pragma once
// Integers read from JSON that a file wrote (metrics.jsonl, summary.json,
// checkpoint headers, saved losses and metrics). nlohmann's get<int>() on a
// floating-point value is a static_cast: undefined behaviour out of range
// (1e38 as an int, found by the metrics fuzzer), and 2.5 silently becomes 2.
// These take an integer only when the value is one and fits, and otherwise
// throw the json::type_error that every reader already turns into an error
// naming its file. Private: nlohmann/json stays out of public headers.

#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace tandem::detail {

template <std::integral T>
T json_integer(const nlohmann::json& j, const std::string& what = "value") {
  if (j.is_number_unsigned()) {
    const auto u = j.get<uint64_t>();
    if (std::in_range<T>(u)) return static_cast<T>(u);
  } else if (j.is_number_integer()) {
    const auto s = j.get<int64_t>();
    if (std::in_range<T>(s)) return static_cast<T>(s);
  } else if (j.is_number_float()) {
    // Writers that print every number as a float (3.0) are taken at their word.
    const double d = j.get<double>();
    if (std::trunc(d) == d && d >= -0x1p63 && d < 0x1p63 &&
        std::in_range<T>(static_cast<int64_t>(d)))
      return static_cast<T>(d);
  }
  throw nlohmann::json::type_error::create(302,
                                           what + " is " + j.dump() + ", not an integer in [" +
                                               std::to_string(std::numeric_limits<T>::min()) +
                                               ", " +
                                               std::to_string(std::numeric_limits<T>::max()) + "]",
                                           &j);
}

// object[key] as an integer, fallback where the key is absent or null.
template <std::integral T>
T json_integer_or(const nlohmann::json& object, const char* key, T fallback) {
  if (!object.is_object()) {
    throw nlohmann::json::type_error::create(
        306, std::string("cannot read '") + key + "' from " + object.type_name(), &object);
  }
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  return json_integer<T>(*it, std::string("'") + key + "'");
}

}  // namespace tandem::detail
