#include "common/stdio_fds.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace mooncake {

ClosedStdio ReopenClosedStdio(ClosedStdioAs as) {
  ClosedStdio closed;
  bool* was_closed[] = {&closed.in, &closed.out, &closed.err};
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    *was_closed[fd] = true;
    // No O_CLOEXEC: a standard descriptor is inherited like any other.
    int flags = as == ClosedStdioAs::kUnusable ? O_PATH : fd == 0 ? O_RDONLY : O_WRONLY;
    int placeholder = open("/dev/null", flags);
    // Without /dev/null (a bare chroot), the root directory opened for
    // reading still holds the number, and no write to it succeeds.
    if (placeholder < 0) placeholder = open("/", O_RDONLY | O_DIRECTORY);
    // The lowest free number is `fd` itself, as 0..fd-1 are open by now.
    if (placeholder >= 0 && placeholder != fd) {
      dup2(placeholder, fd);
      close(placeholder);
    }
  }
  return closed;
}

}  // namespace mooncake
