// The tests of rdmacm_iwarp_api_test run on softrdma's iWARP device: the binary
// asks for it (SOFTRDMA_WIRE=iwarp) before any test opens a device, so that a
// test finding any other device has found a defect, not a machine without iWARP.
#pragma once

#include <infiniband/verbs.h>

namespace softrdma::rdmacm::testing {

// True when the process's device is softrdma's iWARP one.
inline bool iwarp_device() {
  int count = 0;
  ibv_device** devices = ibv_get_device_list(&count);
  const bool iwarp =
      devices != nullptr && count > 0 && devices[0]->transport_type == IBV_TRANSPORT_IWARP;
  if (devices != nullptr) ibv_free_device_list(devices);
  return iwarp;
}

}  // namespace softrdma::rdmacm::testing

#define ASSERT_IWARP_DEVICE() \
  ASSERT_TRUE(::softrdma::rdmacm::testing::iwarp_device()) << "SOFTRDMA_WIRE=iwarp was not taken"
