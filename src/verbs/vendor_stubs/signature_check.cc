// Compile-time check that each stub in vendor_stub.c returns what the real
// prototype returns, the one thing its generic definition must get right
// (see vendor_stub.c). Built, never linked: a mismatch fails the build.
#include <infiniband/efadv.h>
#include <infiniband/mlx5dv.h>

#include <sys/types.h>

#include <type_traits>

namespace {

enum class StubKind { kPTR, kINT, kFD, kSSIZE, kBOOL, kVOID };

template <class F>
struct ReturnOf;
template <class R, class... Args>
struct ReturnOf<R(Args...)> {
  using type = R;
};

template <class F>
constexpr bool returns(StubKind kind) {
  using R = typename ReturnOf<F>::type;
  switch (kind) {
    case StubKind::kPTR:
      return std::is_pointer_v<R>;
    case StubKind::kINT:
    case StubKind::kFD:
      return std::is_same_v<R, int>;
    case StubKind::kSSIZE:
      return std::is_same_v<R, ssize_t>;
    case StubKind::kBOOL:
      return std::is_same_v<R, bool>;
    case StubKind::kVOID:
      return std::is_void_v<R>;
  }
  return false;
}

#define SOFTRDMA_STUB(kind, name, node)                    \
  static_assert(returns<decltype(name)>(StubKind::k##kind), \
                #name ": the stub's return kind differs from the header");
#include "efa_stubs.def"
#include "mlx5_stubs.def"
#undef SOFTRDMA_STUB

}  // namespace
