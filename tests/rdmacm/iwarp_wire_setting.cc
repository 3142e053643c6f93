// rdmacm_iwarp_api_test's device is the iWARP one (iwarp_device.h): the setting
// is made at load, before main and so before any test opens a device, whether
// ctest or a developer starts the binary.
#include <cstdlib>

namespace {
[[maybe_unused]] const int kWireSetting = setenv("SOFTRDMA_WIRE", "iwarp", 1);
}  // namespace
