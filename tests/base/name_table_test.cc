// NameTable: the one place an enum's names are written.
#include "tandem/base/name_table.h"

#include <gtest/gtest.h>

namespace tandem {
namespace {

enum class Colour : uint8_t { red, green, blue, unnamed };

constexpr NameTable<Colour, 4> kColours{"colour",
                                        {{{Colour::red, "red"},
                                          {Colour::green, "green"},
                                          {Colour::blue, "blue"},
                                          {Colour::green, "verde"}}}};

TEST(NameTable, NamesParsesAndListsTheChoices) {
  for (Colour c : {Colour::red, Colour::green, Colour::blue})
    EXPECT_EQ(kColours.parse(kColours.name(c)), c);
  EXPECT_EQ(kColours.name(Colour::green), "green");  // an alias parses, the first name names
  EXPECT_EQ(kColours.parse("verde"), Colour::green);
  EXPECT_EQ(kColours.choices(), "red, green or blue");
}

TEST(NameTable, UnknownNamesAndValuesAreErrorsThatSaySo) {
  try {
    kColours.parse("Red");
    FAIL() << "parsed";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "unknown colour 'Red' (expected red, green or blue)");
  }
  EXPECT_THROW(kColours.name(Colour::unnamed), InvalidArgument);
}

}  // namespace
}  // namespace tandem
