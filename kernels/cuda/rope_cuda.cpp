#include "kernels/cuda/rope_cuda.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/cuda/rope_params.h"
#include "kernels/cuda/torch_glue.h"

namespace varscope::kernels::cuda {

std::vector<at::Tensor> rope2d(const std::vector<at::Tensor>& xs, const at::Tensor& rope,
                               at::ScalarType out_dtype) {
    TORCH_CHECK(!xs.empty() && xs.size() <= static_cast<size_t>(RopeParams::kMaxInputs),
                "fused RoPE: 1 or 2 inputs per launch");
    const c10::cuda::CUDAGuard guard(xs[0].device());
    RopeParams p;
    p.inputs = static_cast<int>(xs.size());
    p.batch = xs[0].size(0);
    p.heads = xs[0].size(1);
    p.tokens = xs[0].size(2);
    p.head_dim = xs[0].size(3);
    p.out_type = out_dtype == at::kBFloat16 ? RopeOut::BFloat16 : RopeOut::Float32;
    std::vector<at::Tensor> outs;
    for (size_t w = 0; w < xs.size(); ++w) {
        const auto& x = xs[w];
        p.x[w] = x.data_ptr<float>();
        for (int d = 0; d < 3; ++d) p.x_stride[w][d] = x.stride(d);
        outs.push_back(at::empty(x.sizes(), x.options().dtype(out_dtype)));
        p.out[w] = outs.back().data_ptr();
    }
    p.rope = rope.data_ptr<float>();
    p.rope_stride_part = rope.stride(0);
    p.rope_stride_batch = rope.dim() == 4 ? rope.stride(1) : 0;
    p.rope_stride_token = rope.stride(rope.dim() - 2);
    check_cuda(launch_rope2d(p, stream_of(xs[0])), "fused RoPE kernel");
    return outs;
}

}  // namespace varscope::kernels::cuda
