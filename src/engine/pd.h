// Protection domain (IBA 10.2.3): the boundary a QP's memory accesses may not cross.
#pragma once

#include <atomic>
#include <cstdint>

namespace softrdma::engine {

class Device;

class Pd {
 public:
  Pd(Device& device, uint32_t handle) : device_(device), handle_(handle) {}
  Device& device() const { return device_; }
  uint32_t handle() const { return handle_; }
  // Objects (MRs, QPs) that still point here: deallocating a used PD is EBUSY.
  std::atomic<uint32_t> users{0};

 private:
  Device& device_;
  uint32_t handle_;
};

}  // namespace softrdma::engine
