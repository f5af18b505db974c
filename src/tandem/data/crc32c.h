#pragma once
// CRC-32C (Castagnoli), as TFRecord uses it: SSE4.2's crc32 instruction where
// the CPU has it, a table otherwise.

#include <cstddef>
#include <cstdint>

namespace tandem::data {

// CRC-32C of bytes, continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);
// TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t bytes);

}  // namespace tandem::data
