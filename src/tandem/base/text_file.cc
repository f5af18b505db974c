#include "tandem/base/text_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tandem/base/error.h"

namespace tandem {

std::string read_text_file(const std::string& path, std::string_view what,
                           std::uintmax_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) {
    TANDEM_THROW(IoError, what, " '", path, "' does not exist",
                 error ? " (" + error.message() + ")" : "");
  }
  if (!fs::is_regular_file(status))
    TANDEM_THROW(IoError, what, " '", path, "' is not a regular file");
  const std::uintmax_t size = fs::file_size(path, error);
  if (error)
    TANDEM_THROW(IoError, "cannot read the size of ", what, " '", path, "': ", error.message());
  const auto too_big = [&](std::uintmax_t bytes) {
    TANDEM_THROW(IoError, what, " '", path, "' has ", bytes, " bytes, more than the ", max_bytes,
                 " a ", what, " may have");
  };
  if (size > max_bytes) too_big(size);
  std::ifstream in(path, std::ios::binary);
  if (!in) TANDEM_THROW(IoError, "cannot open ", what, " '", path, "': ", std::strerror(errno));
  std::string text;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    text.append(chunk, static_cast<size_t>(in.gcount()));
    if (text.size() > max_bytes) too_big(text.size());
  }
  if (in.bad()) TANDEM_THROW(IoError, "cannot read ", what, " '", path, "'");
  return text;
}

}  // namespace tandem
