#include "doctor/doctor.h"

#include <algorithm>

#include "softrdma_version.h"

namespace softrdma::tools {
namespace {

constexpr int kTextColumn = 25;  // verdict (8) and topic (15), each with a space
constexpr int kWidth = 100;

// `text` cut at spaces into lines of at most kWidth columns, all but the first
// indented to kTextColumn: long findings stay readable in a terminal and a log.
void print_wrapped(FILE* out, const char* verdict, const char* topic, const std::string& text) {
  std::fprintf(out, "%-8s %-15s ", verdict, topic);
  size_t at = 0;
  while (at < text.size()) {
    size_t end = std::min(text.size(), at + (kWidth - kTextColumn));
    if (end < text.size()) {
      const size_t space = text.rfind(' ', end);
      if (space != std::string::npos && space > at) end = space;
    }
    if (at != 0) std::fprintf(out, "%*s", kTextColumn, "");
    std::fprintf(out, "%s\n", text.substr(at, end - at).c_str());
    at = text.find_first_not_of(' ', end);
    if (at == std::string::npos) break;
  }
}

}  // namespace

std::vector<Finding> examine(const std::filesystem::path& library_dir) {
  std::vector<Finding> findings;
  // The address first: opening the device binds its port, and a held port is
  // then explained there.
  findings.push_back(check_address());
  std::optional<DeviceSnapshot> device;
  findings.push_back(check_device(library_dir, device));
  findings.push_back(check_sysfs_view(device ? &*device : nullptr));
  findings.push_back(check_same_host());
  findings.push_back(check_dev_shm());
  findings.push_back(check_memlock());
  findings.push_back(check_rdma_core());
  findings.push_back(check_ucx());
  findings.push_back(check_libfabric());
  return findings;
}

int print_findings(const std::vector<Finding>& findings, FILE* out) {
  std::fprintf(out, "softrdma doctor (softrdma %s): what this machine allows\n\n", kVersion);
  int counts[3] = {};
  for (const Finding& f : findings) {
    static const char* const labels[] = {"ok", "note", "PROBLEM"};
    ++counts[int(f.verdict)];
    print_wrapped(out, labels[int(f.verdict)], f.topic.c_str(), f.found);
    if (!f.advice.empty()) print_wrapped(out, "", "", "change: " + f.advice);
  }
  std::fprintf(out, "\n%d ok, %d notes, %d problems\n", counts[0], counts[1], counts[2]);
  return counts[int(Verdict::kProblem)] == 0 ? 0 : 1;
}

}  // namespace softrdma::tools
