#include "tandem/base/detail/toml_document.h"

#include <memory>
#include <string>

namespace tandem::detail {
namespace {

// Whether c may continue a dotted key: bare-key characters, whitespace
// around the dots, and any byte of a multibyte character (toml++ may take
// Unicode bare keys), so that nothing toml++ joins into one key is split.
bool continues_key(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == ' ' || c == '\t' || u >= 0x80;
}

}  // namespace

int64_t line_of_overlong_dotted_key(std::string_view text) {
  const size_t n = text.size();
  int64_t line = 1;
  int dots = 0;  // in the current run
  size_t i = 0;
  while (i < n) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      dots = 0;
      ++i;
    } else if (c == '#') {
      while (i < n && text[i] != '\n') ++i;
      dots = 0;
    } else if (c == '"' || c == '\'') {
      const bool basic = c == '"';
      if (text.substr(i, 3) == std::string_view(basic ? "\"\"\"" : "'''")) {
        // A multi-line string: never part of a key.
        size_t j = i + 3;
        while (j < n && text.substr(j, 3) != text.substr(i, 3)) {
          if (basic && text[j] == '\\' && j + 1 < n) ++j;  // the escaped character
          if (text[j] == '\n') ++line;
          ++j;
        }
        i = j + 3;
        for (int extra = 0; extra < 2 && i < n && text[i] == c; ++extra) ++i;
        dots = 0;
      } else {
        // A single-line string: a key part when quoted keys are joined.
        size_t j = i + 1;
        while (j < n && text[j] != c && text[j] != '\n') j += basic && text[j] == '\\' ? 2 : 1;
        i = j < n && text[j] == c ? j + 1 : j;
      }
    } else if (c == '.') {
      if (++dots >= kMaxDottedKeyParts) return line;
      ++i;
    } else {
      if (!continues_key(c)) dots = 0;
      ++i;
    }
  }
  return 0;
}

toml::table parse_toml(std::string_view text, std::string_view source) {
  if (const int64_t line = line_of_overlong_dotted_key(text)) {
    const std::string what = "a dotted key of more than " + std::to_string(kMaxDottedKeyParts) +
                             " parts (the most tandem's TOML reader takes)";
    throw toml::parse_error(what.c_str(),
                            toml::source_position{static_cast<toml::source_index>(line), 1},
                            std::make_shared<const std::string>(std::string(source)));
  }
  return toml::parse(text, source);
}

}  // namespace tandem::detail
