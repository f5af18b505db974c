#include "tandem/base/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "tandem/base/error.h"

namespace tandem {
namespace {

void write_all(int fd, std::string_view bytes, const std::string& path, std::string_view what) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      TANDEM_THROW(IoError, "cannot write ", what, " '", path, "': ", std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace

void write_file_atomically(const std::string& path, std::span<const std::string_view> parts,
                           std::string_view what) {
  const std::string temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    TANDEM_THROW(IoError, "cannot create ", what, " '", temporary, "': ", std::strerror(errno));
  try {
    for (std::string_view part : parts) write_all(fd, part, temporary, what);
    if (::fsync(fd) != 0)
      TANDEM_THROW(IoError, "cannot sync ", what, " '", temporary, "': ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(temporary.c_str());
    throw;
  }
  ::close(fd);
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    TANDEM_THROW(IoError, "cannot move ", what, " into place at '", path,
                 "': ", std::strerror(error));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace tandem
