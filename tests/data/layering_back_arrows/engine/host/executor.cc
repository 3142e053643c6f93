#include "engine/rc/connection.h"  // the shared path knows RoCE
#include "engine/device.h"  // allowed
