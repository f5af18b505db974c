#pragma once
// Files written so that a crash, a kill or a full disk never leaves a torn
// one behind: the bytes go to PATH.tmp.XXXXXX (a name of its own), are
// synced, and the temporary is renamed over PATH (then the directory is
// synced, making the rename durable). Readers see the old file or the
// whole new one.

#include <span>
#include <string>
#include <string_view>

namespace tandem {

// A file written piece by piece (a checkpoint whose tensors are gathered
// one at a time) and put in place by commit(); destroyed uncommitted (an
// error on the way), it removes its temporary and leaves the old file.
class AtomicFile {
 public:
  // `what` names the file in errors ("checkpoint", "safetensors file").
  // Throws IoError when the temporary cannot be created.
  AtomicFile(std::string path, std::string_view what);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Throws IoError (a full disk, say).
  void write(std::string_view bytes);
  // Syncs, renames over the path and syncs the folder (where the folder can
  // be opened and its file system syncs folders); throws IoError.
  void commit();

 private:
  std::string path_, temporary_, what_;
  int fd_ = -1;
};

// Writes the parts one after another as the file at `path`. Throws IoError
// (the temporary is removed, the old file is untouched).
void write_file_atomically(const std::string& path, std::span<const std::string_view> parts,
                           std::string_view what);

}  // namespace tandem
