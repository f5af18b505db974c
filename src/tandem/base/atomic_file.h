#pragma once
// Files written so that a crash, a kill or a full disk never leaves a torn
// one behind: the bytes go to PATH.tmp, are synced, and the temporary is
// renamed over PATH (then the directory is synced, making the rename
// durable). Readers see the old file or the whole new one.

#include <span>
#include <string>
#include <string_view>

namespace tandem {

// Writes the parts one after another as the file at `path`. `what` names the
// file in errors ("checkpoint", "safetensors file"). Throws IoError (the
// temporary is removed, the old file is untouched).
void write_file_atomically(const std::string& path, std::span<const std::string_view> parts,
                           std::string_view what);

}  // namespace tandem
