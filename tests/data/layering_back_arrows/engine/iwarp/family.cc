#include "engine/rc/connection.h"  // a family reaches another
