#pragma once
// Checkpoint files: named tensors plus string metadata, checksummed, written
// atomically (temporary file, fsync, rename) so that a crash or Ctrl-C while
// saving never leaves a torn checkpoint behind.
//
// Layout: "TNDMCKPT", u32 version, u64 header length, JSON header (metadata and
// each tensor's name, dtype, shape, offset, length), padding to 64 bytes, the
// tensor bytes, and a CRC-32 of everything before it. Little-endian.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/base/atomic_file.h"
#include "tandem/distribute/engine_state.h"

namespace tandem::train {

// Named tensors and metadata (the engine's state plus the trainer's position).
using Checkpoint = distribute::EngineState;

// A checkpoint file written as an engine saves its state
// (distribute::Engine::save_state(StateWriter&)): the header when begin()
// lays the tensors out, each tensor's bytes as put() gives it (so a state
// gathered piece by piece is never whole in memory), and the CRC and the
// rename into place at commit(). `metadata` (the trainer's) joins the
// engine's. Destroyed before commit(), it leaves the old file. Throws
// IoError when the file cannot be written, InvalidArgument for tensors
// that do not follow the layout.
class CheckpointWriter : public distribute::StateWriter {
 public:
  explicit CheckpointWriter(std::string path, std::map<std::string, std::string> metadata = {});
  ~CheckpointWriter() override;
  void begin(const std::map<std::string, std::string>& metadata,
             const std::vector<distribute::TensorLayout>& layout) override;
  void put(const std::string& name, const Tensor& tensor) override;
  void commit();

 private:
  void write(std::string_view bytes);

  std::unique_ptr<AtomicFile> file_;
  std::string path_;
  std::map<std::string, std::string> metadata_;
  std::vector<distribute::TensorLayout> layout_;
  size_t written_ = 0;
  bool begun_ = false;
  uint32_t crc_ = 0;
};

// Throws IoError when the file cannot be written.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
// Throws IoError naming the file for a missing, truncated or corrupt checkpoint.
Checkpoint load_checkpoint(const std::string& path);
// A checkpoint's metadata alone, from its header, without reading (or
// checking the checksum of) its tensors: what a resume reads before the
// run loads the whole file. IoError as load_checkpoint for a missing file,
// a bad magic or version, a header longer than the file or not JSON.
std::map<std::string, std::string> read_checkpoint_metadata(const std::string& path);

}  // namespace tandem::train
