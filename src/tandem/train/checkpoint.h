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

#include "tandem/distribute/engine_state.h"

namespace tandem::train {

// Named tensors and metadata (the engine's state plus the trainer's position).
using Checkpoint = distribute::EngineState;

// Throws IoError when the file cannot be written.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
// Throws IoError naming the file for a missing, truncated or corrupt checkpoint.
Checkpoint load_checkpoint(const std::string& path);

}  // namespace tandem::train
