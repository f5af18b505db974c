#pragma once
// Shared by the fuzz harnesses: the input as a file, for the readers that
// take a path, and the rule every harness follows: tandem::Error is the
// expected answer to bad bytes; anything else escapes and libFuzzer reports
// it (a crash, a std::bad_alloc, a std::out_of_range, a leak, a hang).

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace tandem::fuzz {

// A directory of this process's own (on tmpfs when there is one).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path base =
        std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    std::filesystem::path d = base / ("tandem-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Writes the input to scratch_dir()/name and returns the path.
inline std::string as_file(const uint8_t* data, size_t size, const std::string& name) {
  const std::string path = (scratch_dir() / name).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace tandem::fuzz
