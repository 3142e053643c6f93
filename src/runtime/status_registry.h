// The status segments this process made and has not removed yet (issue 14 defect
// 9): a process that exits normally — return from main, exit() — removes them,
// whether or not it closed its devices (librdmacm never closes its own). The
// mappings stay: a progress thread still counting into one at exit keeps its
// memory; only the names go. A killed process cannot do this; the next reader
// removes what it left (status_reader.cc).
#pragma once

#include <sys/types.h>

#include <string>

namespace softrdma::runtime::status_registry {

// Records a file made by this process (and, the first time, arranges the removal
// at exit).
void add(const std::string& path, dev_t dev, ino_t ino);
// Forgets it; false when it was not recorded (by this process).
bool remove(const std::string& path, dev_t& dev, ino_t& ino);
// Whether this process made `path` and still has it.
bool holds(const std::string& path);

}  // namespace softrdma::runtime::status_registry
