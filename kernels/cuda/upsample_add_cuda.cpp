#include "kernels/cuda/upsample_add_cuda.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>

#include <cmath>
#include <cstdint>

#include "kernels/alignment.h"
#include "kernels/cuda/torch_glue.h"
#include "kernels/cuda/upsample_add_params.h"

namespace varscope::kernels::cuda {

namespace {

// `cache` float32, or undefined with dense/sparse given.
at::Tensor run(const at::Tensor& o, const at::Tensor& cache, const at::Tensor& dense,
               const at::Tensor& sparse, const at::Tensor& tap_ids, const at::Tensor& tap_weights) {
    const c10::cuda::CUDAGuard guard(o.device());
    auto out = at::empty(o.sizes(), o.options().memory_format(at::MemoryFormat::Contiguous));
    UpsampleAddParams p;
    p.o = o.data_ptr();
    p.elem = token_elem_of(o, "upsample_add");
    p.o_stride[0] = o.stride(0);
    p.o_stride[1] = o.stride(1);
    p.o_stride[2] = o.stride(2);
    const at::Tensor& residual = cache.defined() ? cache : dense;
    if (cache.defined()) {
        p.cache = cache.data_ptr<float>();
    } else {
        p.dense = dense.data_ptr();
        p.sparse = sparse.data_ptr();
        for (int k = 0; k < 3; ++k) {
            p.dense_stride[k] = dense.stride(k);
            p.sparse_stride[k] = sparse.stride(k);
        }
    }
    p.tap_ids = tap_ids.data_ptr<int64_t>();
    p.tap_weights = tap_weights.data_ptr<float>();
    p.out = out.data_ptr();
    p.batch = static_cast<int>(o.size(0));
    p.heads = static_cast<int>(o.size(1));
    p.side = static_cast<int>(tap_ids.size(0));
    p.grid = static_cast<int>(std::llround(std::sqrt(static_cast<double>(residual.size(2)))));
    p.channels = static_cast<int>(o.size(3));
    p.vec4 = p.channels % 4 == 0 && o.stride(0) % 4 == 0 && o.stride(1) % 4 == 0 &&
             o.stride(2) % 4 == 0 && aligned(p.o, 4 * o.element_size()) &&
             (!cache.defined() || aligned(p.cache, 16)) && aligned(p.out, 4 * o.element_size());
    check_cuda(launch_upsample_add(p, stream_of(o)), "upsample_add kernel");
    return out;
}

}  // namespace

at::Tensor upsample_add(const at::Tensor& o, const at::Tensor& cache, const at::Tensor& tap_ids,
                        const at::Tensor& tap_weights) {
    return run(o, cache, {}, {}, tap_ids, tap_weights);
}

at::Tensor upsample_add_difference(const at::Tensor& o, const at::Tensor& dense,
                                   const at::Tensor& sparse, const at::Tensor& tap_ids,
                                   const at::Tensor& tap_weights) {
    return run(o, {}, dense, sparse, tap_ids, tap_weights);
}

}  // namespace varscope::kernels::cuda
