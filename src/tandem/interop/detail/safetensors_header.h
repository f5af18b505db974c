#pragma once
// The JSON header of a safetensors file, read event by event (nlohmann's SAX
// interface) straight into its entries and metadata: what the reader holds
// grows with the tensors the header lists, not with the shape of its JSON
// (a parsed JSON tree takes about 40 bytes for each two-byte "[]", so a
// 100 MB header could have taken 4 GB before any check).

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "tandem/interop/safetensors.h"

namespace tandem::interop::detail {

// The header's key for the file's string metadata.
inline constexpr const char* kSafetensorsMetadataKey = "__metadata__";

// More dimensions than any tensor has; a header claiming more is corrupt.
inline constexpr size_t kMaxSafetensorsRank = 64;

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in the header's order
  std::map<std::string, std::string> metadata;
};

// Throws IoError "'<path>' has a corrupt header: <what>" for text that is
// not JSON; not an object of tensors, each an object with a string "dtype",
// a "shape" of at most kMaxSafetensorsRank integers and "data_offsets" of
// two non-negative integers (other fields are skipped); a tensor named
// twice; or a "__metadata__" that is not an object of strings. Dimensions
// are not checked here (negative ones are kept for the caller to name).
SafetensorsHeader parse_safetensors_header(const std::string& text, const std::string& path);

}  // namespace tandem::interop::detail
