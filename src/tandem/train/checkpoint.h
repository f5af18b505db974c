#pragma once
// Checkpoint files: named tensors plus string metadata, checksummed, written
// atomically (temporary file, fsync, rename) so that a crash or Ctrl-C while
// saving never leaves a torn checkpoint behind.
//
// Layout: "TNDMCKPT", u32 version, u64 header length, JSON header (metadata and
// each tensor's name, dtype, shape, offset, length), padding to 64 bytes, the
// tensor bytes, and a CRC-32 of everything before it. Little-endian.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tandem/tensor/tensor.h"

namespace tandem::train {

struct Checkpoint {
  std::map<std::string, std::string> metadata;
  std::vector<std::pair<std::string, Tensor>> tensors;

  // The tensor with this name; throws IoError when absent.
  const Tensor& tensor(const std::string& name) const;
  // Copies the tensor with this name into `target`; throws IoError when it is
  // absent or differs from target in shape or dtype.
  void load_into(const std::string& name, Tensor& target) const;
  // Metadata value; throws IoError when absent.
  const std::string& meta(const std::string& key) const;
};

// Throws IoError when the file cannot be written.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
// Throws IoError naming the file for a missing, truncated or corrupt checkpoint.
Checkpoint load_checkpoint(const std::string& path);

}  // namespace tandem::train
