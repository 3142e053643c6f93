#include "engine/iwarp/family.h"  // a family reaches another
#include "engine/rc/connection.h"  // allowed
