#include "engine/wqe.h"

#include "wire/psn.h"

namespace softrdma::engine {

uint32_t SendWqe::last_psn() const { return wire::psn_add(first_psn, int64_t(npackets) - 1); }

}  // namespace softrdma::engine
