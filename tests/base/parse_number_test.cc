// parse_number: the whole text is one number of the type, or nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "tandem/base/parse_number.h"

namespace tandem {
namespace {

TEST(ParseNumber, TakesOnlyTextThatIsWhollyOneNumberOfTheType) {
  EXPECT_EQ(parse_number<int64_t>("42"), 42);
  EXPECT_EQ(parse_number<int64_t>("-7"), -7);
  EXPECT_EQ(parse_number<int64_t>("9223372036854775807"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(parse_number<uint64_t>("18446744073709551615"), std::numeric_limits<uint64_t>::max());
  for (const char* bad : {"", "5x", "x5", " 5", "5 ", "+5", "0x10", "1e3", "9223372036854775808"})
    EXPECT_FALSE(parse_number<int64_t>(bad).has_value()) << "'" << bad << "'";
  // A negative count is not wrapped into an unsigned one.
  EXPECT_FALSE(parse_number<uint64_t>("-1").has_value());
  EXPECT_FALSE(parse_number<int>("2147483648").has_value());
  EXPECT_EQ(parse_number<double>("0.25"), 0.25);
  EXPECT_EQ(parse_number<double>("-1.5e3"), -1500.0);
  EXPECT_FALSE(parse_number<double>("1.5.2").has_value());
  EXPECT_FALSE(parse_number<double>("").has_value());
}

}  // namespace
}  // namespace tandem
