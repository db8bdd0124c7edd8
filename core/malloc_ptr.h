// Memory from malloc / aligned_alloc owned by a unique_ptr that frees it with std::free.
#pragma once

#include <cstdlib>
#include <memory>

namespace mt {

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};
template <class T>
using MallocPtr = std::unique_ptr<T, FreeDeleter>;

}  // namespace mt
