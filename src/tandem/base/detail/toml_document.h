#pragma once
// TOML text parsed with the limit toml++ 3.3 lacks. Private: toml++ stays
// out of public headers.

#include <toml++/toml.h>
#include <string>
#include <string_view>

namespace tandem::detail {

// toml++ 3.3 descends one call deeper for every part of a dotted key
// (`a.b.c = 1`, `[a.b.c]`): a crafted key of about 100,000 parts, 200 KiB
// of text, overflows an 8 MiB stack. Keys of more parts than this are
// refused before parsing (the limit toml++ sets on nested arrays and inline
// tables).
inline constexpr int kMaxDottedKeyParts = 256;

// The line (from 1) of the first run of more than kMaxDottedKeyParts parts
// joined by dots, or 0. It counts over every run toml++ could take as one
// dotted key (bare-key characters, single-line quoted strings, spaces), so
// a key it passes is short; dots inside multi-line strings and comments
// are not counted.
int64_t line_of_overlong_dotted_key(std::string_view text);

// toml::parse(text, source), refusing overlong dotted keys first with a
// toml::parse_error at their line, as the parser reports its own errors.
toml::table parse_toml(std::string_view text, std::string_view source);

}  // namespace tandem::detail
