#include "engine/roce/family.h"  // a protocol reaches its family's ingress
#include "engine/roce/tx_batch.h"  // allowed
