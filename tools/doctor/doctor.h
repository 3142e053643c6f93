// `softrdma doctor`: what this machine lets softrdma do, found by trying it, in
// plain words, with what to change (issue 17; docs/decisions/doctor.md).
//
// Every check asks the real system: it opens the device through the library a
// program would load, enters the namespaces `softrdma run` enters, attaches to a
// sibling process as the same-host path does, writes to /dev/shm, binds the
// RoCEv2 port. Reading a setting (a sysctl, a limit) only explains a result.
#pragma once

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "run/device_query.h"

namespace softrdma::tools {

enum class Verdict {
  kOk,       // works
  kNote,     // works, with a limit worth knowing (a slower path, a setting to add)
  kProblem,  // something a user expects fails: the advice says what to change
};

struct Finding {
  std::string topic;   // "device", "sysfs view", "same-host path", ...
  Verdict verdict = Verdict::kOk;
  std::string found;   // what the check saw
  std::string advice;  // what to change, or "" when nothing
};

// Runs every check with the libraries in `library_dir` (softrdma's lib/).
std::vector<Finding> examine(const std::filesystem::path& library_dir);

// One block per finding and a closing count; returns the exit status
// (0: no problem, 1: at least one).
int print_findings(const std::vector<Finding>& findings, FILE* out);

// The checks, each on its own (doctor_system.cc, doctor_software.cc).
// The device as a program would open it; `snapshot` is set when it opened.
Finding check_device(const std::filesystem::path& library_dir,
                     std::optional<DeviceSnapshot>& snapshot);
Finding check_address();
Finding check_sysfs_view(const DeviceSnapshot* snapshot);
Finding check_same_host();
Finding check_dev_shm();
Finding check_memlock();
Finding check_rdma_core();
Finding check_ucx();
Finding check_libfabric();

}  // namespace softrdma::tools
