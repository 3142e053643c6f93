// The status segment's files as files (runtime/status_segment.h): opening one
// without following links, reading one without trusting it, and removing one only
// when it is still the very file that was checked. Shared by the owner (which
// meets leftovers of an earlier process with its pid) and the readers.
// docs/decisions/status-segment-safety.md says why each check is there.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <string>

#include "runtime/status_segment.h"

namespace softrdma::runtime::status_file {

inline constexpr char kPrefix[] = "softrdma-";

// Header, engine counters and transport counters: what every segment holds
// before its first row.
size_t fixed_bytes();

// Opens `path` to read: never through a symbolic link, never a FIFO or device
// (it must be a regular file, so a read cannot block or touch hardware). -1 when
// it is not such a file; `st` describes the file opened.
int open_for_reading(const std::string& path, struct stat& st);

// Reads a segment of this layout from `fd` (pread: a file that shrinks under the
// reader gives short reads, never SIGBUS). False for anything else.
bool parse(int fd, const struct stat& st, StatusReport& out);

// Unlinks `path` if it still names the file `st` describes (same device and
// inode): a file swapped in since it was checked is left alone. True only when
// the unlink succeeded.
bool remove_if_same(const std::string& path, dev_t dev, ino_t ino);
// The same with lstat and unlink only: async-signal-safe (status_registry.cc).
bool remove_if_same(const char* path, dev_t dev, ino_t ino);

// Whether a process with this pid exists (EPERM: it does, as another user).
bool process_exists(int pid);

}  // namespace softrdma::runtime::status_file
