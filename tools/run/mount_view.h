// The sysfs and /dev view `softrdma run` gives the program it starts
// (docs/decisions/ucx.md). Programs such as UCX find RDMA devices through files a
// kernel driver creates: /dev/infiniband/uverbsN must be an accessible character
// device, /sys/class/infiniband/<dev>/ports/<n>/gid_attrs/types/<i> says a GID's
// RoCE version. A user-space library cannot create them, so `softrdma run` does,
// for its own process only: it enters a mount namespace of its own (a user
// namespace too when it is not privileged, keeping its uid and gid), covers
// /sys/class and /dev with a tmpfs that bind-mounts every original entry, adds
// the device's entries, and then execs the program.
#pragma once

#include <string>
#include <vector>

#include "run/sysfs_files.h"

namespace softrdma::tools {

// Enters the view in the calling process, which must be single-threaded (a user
// namespace requires it). On failure returns false with the reason; whatever was
// mounted is undone, so the process sees the original files.
//   class_files: the files under /sys/class (class_files())
//   uverbs_name: the /dev/infiniband entry, e.g. "uverbs0": /dev/null bound over
//                it, a character device nothing is ever read from or written to
bool enter_view(const std::vector<ViewFile>& class_files, const std::string& uverbs_name,
                std::string& error);

}  // namespace softrdma::tools
