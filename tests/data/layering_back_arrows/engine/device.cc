#include "engine/roce/family.h"  // the core names a family
#include "engine/qp.h"  // allowed
