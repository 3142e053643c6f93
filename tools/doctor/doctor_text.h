// Small readers for `softrdma doctor`: a sysctl's value, a field of
// /proc/self/status.
#pragma once

#include <fstream>
#include <string>

namespace softrdma::tools {

// The first line of `path`, "" when it cannot be read (an absent sysctl).
inline std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The value of "Name:\tvalue" in /proc/self/status, "" when absent.
inline std::string status_field(const std::string& name) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + ":", 0) != 0) continue;
    const size_t at = line.find_first_not_of(" \t", name.size() + 1);
    return at == std::string::npos ? "" : line.substr(at);
  }
  return "";
}

}  // namespace softrdma::tools
