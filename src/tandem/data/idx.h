#pragma once
// IDX files (the MNIST family's format): a big-endian header giving the
// element type and dimensions, then the elements. Files may be gzip-compressed
// (detected from the content) or raw. Reusable by the input pipeline.

#include <cstdint>
#include <string>

#include "tandem/tensor/tensor.h"

namespace tandem::data {

// Headers claiming more data bytes than this (16 GiB) are refused before
// anything is allocated.
inline constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 34;

// Reads an IDX file into a tensor of its dimensions: u8 stays u8; i8, i16 and
// i32 become i32; f32 and f64 become f32. Throws IoError naming the file for a
// missing or unreadable file, a bad magic number, an unknown element type, a
// claim above kMaxIdxBytes, or a size that does not match the header
// (truncated or trailing bytes). A raw file's claim is checked against its
// size before allocating; a gzipped one is read in chunks, its buffer growing
// only as decompressed data arrives.
Tensor read_idx(const std::string& path);

// Writes a u8, i32 or f32 tensor as a raw (uncompressed) IDX file (for tests
// and for exporting data).
void write_idx(const std::string& path, const Tensor& tensor);

}  // namespace tandem::data
