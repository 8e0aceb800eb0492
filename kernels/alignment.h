// Whether a pointer is aligned for vector loads (float4, uint4: 16 bytes; float2: 8): the check
// before every kernel that reads rows as vectors. Plain C++, for the dispatchers and the .cu
// launchers alike.
#pragma once

#include <cstddef>
#include <cstdint>

namespace varscope::kernels {

inline bool aligned(const void* ptr, std::size_t bytes) {
    return reinterpret_cast<std::uintptr_t>(ptr) % bytes == 0;
}

}  // namespace varscope::kernels
