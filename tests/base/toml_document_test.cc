#include "tandem/base/detail/toml_document.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>

namespace tandem {
namespace {

using detail::kMaxDottedKeyParts;
using detail::line_of_overlong_dotted_key;

std::string parts(std::string_view part, std::string_view dot, int count) {
  std::string key(part);
  for (int i = 1; i < count; ++i) key.append(dot).append(part);
  return key;
}

// The pieces joined (by append: GCC 12 warns, falsely, of overlapping
// copies in `"literal" + std::string`).
std::string text(std::initializer_list<std::string_view> pieces) {
  std::string joined;
  for (std::string_view piece : pieces) joined.append(piece);
  return joined;
}

TEST(TomlDocument, KeysOfTheMostPartsParse) {
  const std::string key = parts("a", ".", kMaxDottedKeyParts);
  EXPECT_EQ(line_of_overlong_dotted_key(text({key, " = 1\n"})), 0);
  const toml::table root = detail::parse_toml(text({key, " = 1\n"}), "t.toml");
  EXPECT_TRUE(root.contains("a"));
}

TEST(TomlDocument, LongerKeysAreRefusedAtTheirLine) {
  const int n = kMaxDottedKeyParts + 1;
  EXPECT_EQ(line_of_overlong_dotted_key(text({"x = 1\n", parts("a", ".", n), " = 1\n"})), 2);
  // Table headers, quoted parts, spaces around the dots, inline tables.
  EXPECT_EQ(line_of_overlong_dotted_key(text({"[", parts("a", ".", n), "]\n"})), 1);
  EXPECT_EQ(line_of_overlong_dotted_key(text({parts("\"a.b\"", " . ", n), " = 1\n"})), 1);
  EXPECT_EQ(line_of_overlong_dotted_key(text({parts("'x'", ".", n), " = 1\n"})), 1);
  EXPECT_EQ(line_of_overlong_dotted_key(text({"t = { ", parts("k", ".", n), " = 1 }\n"})), 1);
  // After a multi-line string that holds quotes and escapes.
  EXPECT_EQ(line_of_overlong_dotted_key(
                text({"s = \"\"\"a\n\\\"\"\"\"\"\n", parts("a", ".", n), " = 1\n"})),
            3);
  try {
    detail::parse_toml(text({"\n", parts("a", ".", 100000), " = 1\n"}), "deep.toml");
    ADD_FAILURE() << "no error";
  } catch (const toml::parse_error& e) {
    EXPECT_EQ(e.source().begin.line, 2u);
    EXPECT_NE(std::string(e.description()).find("more than 256 parts"), std::string::npos);
    EXPECT_EQ(*e.source().path, "deep.toml");
  }
}

TEST(TomlDocument, DotsOutsideKeysDoNotCount) {
  const int n = kMaxDottedKeyParts + 10;
  // Numbers in an array, dots in strings, comments and multi-line strings.
  EXPECT_EQ(line_of_overlong_dotted_key(text({"x = [", parts("1.5", ", ", n), "]\n"})), 0);
  EXPECT_EQ(line_of_overlong_dotted_key(text({"s = \"", parts("a", ".", n), ", \"\n"})), 0);
  EXPECT_EQ(line_of_overlong_dotted_key(text({"x = 1 # ", parts("", ".", n), "\n"})), 0);
  EXPECT_EQ(line_of_overlong_dotted_key(text({"s = '''\n", parts("a", ".", n), "'''\n"})), 0);
  EXPECT_EQ(line_of_overlong_dotted_key(text({"s = \"\"\"", parts("a", ".", n), "\"\"\"\n"})), 0);
  // Every line's run starts afresh.
  EXPECT_EQ(line_of_overlong_dotted_key(parts(text({parts("a", ".", 200), " = 1"}), "\n", 4)), 0);
}

}  // namespace
}  // namespace tandem
