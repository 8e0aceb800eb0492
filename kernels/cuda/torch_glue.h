// Host-side glue shared by the LibTorch-facing wrappers of the CUDA kernels (*_cuda.cpp): the
// error check after a launch, the stream a tensor's work goes to, the element-type code the
// token kernels take.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/token_ops_params.h"  // TokenElem

namespace varscope::kernels::cuda {

inline void check_cuda(cudaError_t err, const char* what) {
    TORCH_CHECK(err == cudaSuccess, "CUDA error in ", what, ": ", cudaGetErrorString(err));
}

// PyTorch's current stream on the tensor's device (what graph capture records).
inline cudaStream_t stream_of(const at::Tensor& t) {
    return c10::cuda::getCurrentCUDAStream(t.get_device()).stream();
}

// who names the kernels in the error for any other dtype.
inline TokenElem token_elem_of(const at::Tensor& t, const char* who) {
    switch (t.scalar_type()) {
        case at::kFloat:
            return TokenElem::Float32;
        case at::kHalf:
            return TokenElem::Float16;
        case at::kBFloat16:
            return TokenElem::BFloat16;
        default:
            TORCH_CHECK(false, who, ": unsupported dtype ", t.scalar_type());
    }
    return TokenElem::Float32;
}

}  // namespace varscope::kernels::cuda
