#include "tandem/base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "tandem/base/error.h"

namespace tandem {

AtomicFile::AtomicFile(std::string path, std::string_view what)
    : path_(std::move(path)), temporary_(path_ + ".tmp.XXXXXX"), what_(what) {
  // A name of its own (mkostemp): two writers of one path (two runs sharing
  // an output folder) each finish a whole file instead of truncating and
  // interleaving one shared temporary.
  fd_ = ::mkostemp(temporary_.data(), O_CLOEXEC);
  if (fd_ < 0) {
    TANDEM_THROW(IoError, "cannot create ", what_, " '", temporary_, "': ", std::strerror(errno));
  }
  ::fchmod(fd_, 0644);  // mkostemp's 0600 would hide checkpoints from other readers
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temporary_.c_str());
  }
}

void AtomicFile::write(std::string_view bytes) {
  if (fd_ < 0) TANDEM_THROW(IoError, what_, " '", path_, "' was already committed");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      TANDEM_THROW(IoError, "cannot write ", what_, " '", temporary_, "': ", std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) TANDEM_THROW(IoError, what_, " '", path_, "' was already committed");
  if (::fsync(fd_) != 0)
    TANDEM_THROW(IoError, "cannot sync ", what_, " '", temporary_, "': ", std::strerror(errno));
  // close() can report a write the sync did not (NFS): the file is then
  // not whole.
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0 && errno != EINTR) {
    const int error = errno;
    ::unlink(temporary_.c_str());
    TANDEM_THROW(IoError, "cannot write ", what_, " '", temporary_, "': ", std::strerror(error));
  }
  if (std::rename(temporary_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary_.c_str());
    TANDEM_THROW(IoError, "cannot move ", what_, " into place at '", path_,
                 "': ", std::strerror(error));
  }
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  // The rename is durable once the folder is synced. A folder this process
  // may not read (write and search only) cannot be opened to sync, and some
  // file systems cannot sync folders (EINVAL): the rename stands unsynced,
  // as it would without this step. Any other failure is the disk's.
  const int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return;
  const int synced = ::fsync(dir_fd);
  const int error = errno;
  ::close(dir_fd);
  if (synced != 0 && error != EINVAL && error != ENOTSUP) {
    TANDEM_THROW(IoError, what_, " '", path_, "' is in place, but its folder could not be synced (",
                 std::strerror(error), "): it may not survive a crash");
  }
}

void write_file_atomically(const std::string& path, std::span<const std::string_view> parts,
                           std::string_view what) {
  AtomicFile file(path, what);
  for (std::string_view part : parts) file.write(part);
  file.commit();
}

}  // namespace tandem
