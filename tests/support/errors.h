#pragma once
// Checking the errors a call throws by what their messages say.

#include <gtest/gtest.h>

#include <string>

namespace tandem::testing {

// The message of the error f throws, or "" (with a failure) if it throws
// none of E.
template <typename E, typename F>
std::string error_message(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

inline void expect_contains(const std::string& message, const std::string& part) {
  EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
}

}  // namespace tandem::testing
