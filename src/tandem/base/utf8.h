#pragma once
// UTF-8 checks for text made of bytes (byte-level language models, bytes
// features shown as text).

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem {

// The length of the valid UTF-8 sequence starting at s[i] (RFC 3629: no
// overlong forms, no surrogates, at most U+10FFFF), or 0.
size_t utf8_sequence(std::string_view s, size_t i);

// Whether every byte of s belongs to a valid UTF-8 sequence (what JSON
// text, and so a run's records, can hold).
bool is_utf8(std::string_view s);

// `bytes` as valid UTF-8 for a terminal: valid sequences as they are, every
// other byte as the escape \xNN (a backslash itself stays a backslash).
std::string escape_invalid_utf8(std::string_view bytes);

}  // namespace tandem
