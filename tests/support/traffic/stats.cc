#include "traffic/stats.h"

#include <cstdio>

namespace softrdma::traffic {

void ErrorLog::add(const std::string& message) {
  ++count_;
  if (count_ <= kPrintLimit) {
    std::fprintf(stderr, "[%s] ERROR: %s\n", prefix_.c_str(), message.c_str());
  } else if (count_ == kPrintLimit + 1) {
    std::fprintf(stderr, "[%s] more errors follow; only counting them now\n", prefix_.c_str());
  }
}

void ErrorLog::fatal(const std::string& message) {
  if (!fatal_) std::fprintf(stderr, "[%s] FATAL: %s\n", prefix_.c_str(), message.c_str());
  ++count_;
  fatal_ = true;
}

}  // namespace softrdma::traffic
