// The names this process made in /dev/shm and has not removed yet — its status
// segments (issue 14 defect 9) and its node segment's names (open_device.cc) —
// removed when the process ends: at exit (return from main, exit()), whether or
// not it closed its devices (librdmacm never closes its own), and when SIGTERM,
// SIGINT or SIGHUP ends it by their default action (issue 27 finding 6; not when
// the application handles or ignores them: docs/decisions/exit-signals.md). The
// mappings stay: a progress thread still counting into one at exit keeps its
// memory; only the names go. A process killed otherwise (SIGKILL) cannot do
// this; the next device opened or `softrdma status` removes what it left
// (status_reader.cc, samehost/node_segment.h).
#pragma once

#include <sys/types.h>

#include <string>

namespace softrdma::runtime::status_registry {

// Records a file made by this process (and, the first time, arranges the removal
// at exit and on an ending signal whose action is the default).
void add(const std::string& path, dev_t dev, ino_t ino);
// Forgets it; false when it was not recorded (by this process).
bool remove(const std::string& path, dev_t& dev, ino_t& ino);
// Whether this process made `path` and still has it.
bool holds(const std::string& path);

}  // namespace softrdma::runtime::status_registry
