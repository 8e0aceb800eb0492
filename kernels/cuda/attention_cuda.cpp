#include "kernels/cuda/attention_cuda.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <atomic>
#include <cmath>
#include <string>

#include "kernels/alignment.h"
#include "kernels/cuda/attention_params.h"
#include "kernels/cuda/torch_glue.h"

namespace varscope::kernels::cuda {

cudaError_t probe_kernel_image();  // kernel_probe.cu
// Hopper wgmma kernels (csla_attention_sm90.cuh; the default on Hopper), bf16 only, Output
// epilogue: CSLA block-sparse (csla_attention_sm90_d*.cu) and CS4A gathered
// (cs4a_attention_sm90_d*.cu); which kernel each runs: attention_dispatch.h's sm90_schedule.
cudaError_t launch_csla_sm90_d64_bf16(const AttentionParams&, cudaStream_t);
cudaError_t launch_csla_sm90_d128_bf16(const AttentionParams&, cudaStream_t);
cudaError_t launch_cs4a_sm90_d64_bf16(const AttentionParams&, cudaStream_t);
cudaError_t launch_cs4a_sm90_d128_bf16(const AttentionParams&, cudaStream_t);

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

// The kernels read 16-byte chunks of rows: the last dim must be contiguous and every row start
// 16-byte aligned. Anything else is copied once.
at::Tensor kernel_layout(const at::Tensor& t) {
    const bool ok = t.stride(3) == 1 && t.stride(0) % 8 == 0 && t.stride(1) % 8 == 0 &&
                    t.stride(2) % 8 == 0 && aligned(t.data_ptr(), 16);
    return ok ? t : t.contiguous();
}

void set_strides(int64_t (&dst)[3], const at::Tensor& t) {
    dst[0] = t.stride(0);
    dst[1] = t.stride(1);
    dst[2] = t.stride(2);
}

AttentionParams base_params(const at::Tensor& q, const at::Tensor& k, double scale) {
    AttentionParams p;
    p.q = q.data_ptr();
    p.k = k.data_ptr();
    set_strides(p.q_stride, q);
    set_strides(p.k_stride, k);
    p.batch = static_cast<int>(q.size(0));
    p.heads = static_cast<int>(q.size(1));
    p.len_q = static_cast<int>(q.size(2));
    p.len_k = static_cast<int>(k.size(2));
    p.scale_log2 = scale_log2_of(scale);
    return p;
}

// The sm_90a wgmma kernel where it applies (sm90: the policy allows it), else the sm_80 kernels.
bool use_sm90(bool sm90, const at::Tensor& q, TileMode mode, Epilogue epi) {
    if (!sm90 || (mode != TileMode::BlockSparse && mode != TileMode::Gathered) ||
        epi != Epilogue::Output || q.scalar_type() != at::kBFloat16 ||
        (q.size(3) != 64 && q.size(3) != 128))
        return false;
    int major = 0;
    check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, q.get_device()),
               "cudaDeviceGetAttribute");
    return major == 9;
}

}  // namespace

namespace {

// The fastest measured kernel for the inputs (attention_dispatch.h's sm90_schedule on Hopper;
// bench/results/2026-11-26-h200/csla_sm90_notes.md).
void launch(const AttentionParams& p, const at::Tensor& q, TileMode mode, Epilogue epi,
            bool sm90 = false) {
    const auto stream = stream_of(q);
    const int64_t d = q.size(3);
    const bool bf16 = q.scalar_type() == at::kBFloat16;
    cudaError_t err = cudaErrorNotSupported;
    if (use_sm90(sm90, q, mode, epi)) {
        if (mode == TileMode::Gathered)
            err = d == 64 ? launch_cs4a_sm90_d64_bf16(p, stream)
                          : launch_cs4a_sm90_d128_bf16(p, stream);
        else
            err = d == 64 ? launch_csla_sm90_d64_bf16(p, stream)
                          : launch_csla_sm90_d128_bf16(p, stream);
        check_cuda(err, "sm90 attention kernel launch");
        return;
    }
    if (d == 64) {
        err = bf16 ? launch_attention_d64_bf16(p, mode, epi, stream)
                   : launch_attention_d64_fp16(p, mode, epi, stream);
    } else if (d == 128) {
        err = bf16 ? launch_attention_d128_bf16(p, mode, epi, stream)
                   : launch_attention_d128_fp16(p, mode, epi, stream);
    }
    check_cuda(err, "attention kernel launch");
}

at::Tensor prepare_out(at::Tensor out, const at::Tensor& q) {
    if (!out.defined())
        return at::empty(q.sizes(), q.options().memory_format(at::MemoryFormat::Contiguous));
    TORCH_CHECK(out.sizes() == q.sizes() && out.scalar_type() == q.scalar_type() &&
                    out.device() == q.device() && out.is_contiguous(),
                "out must be a contiguous ", q.scalar_type(), " tensor of shape ", q.sizes(),
                " on ", q.device());
    return out;
}

at::Tensor device_list(const at::Tensor& t, const at::Tensor& q) {
    return t.to(q.device(), at::kInt).contiguous();
}

AttentionResult run_listed(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                           const at::Tensor& lists, const at::Tensor& counts, int64_t block_q,
                           int64_t block_k, double scale, bool return_lse, at::Tensor out,
                           TileMode mode, bool sm90) {
    TORCH_CHECK(block_q % kQueryTile == 0 && block_k % kKeyTile == 0,
                "CUDA sparse attention needs block sizes that are multiples of 64, got ", block_q,
                " and ", block_k);
    const c10::cuda::CUDAGuard guard(q_in.device());
    const auto q = kernel_layout(q_in), k = kernel_layout(k_in), v = kernel_layout(v_in);
    const auto idx = device_list(lists, q), cnt = device_list(counts, q);
    TORCH_CHECK(idx.size(0) >= ceil_div(q.size(2), block_q) && cnt.size(0) == idx.size(0),
                "lists must cover ", ceil_div(q.size(2), block_q), " query blocks");
    AttentionResult r;
    r.out = prepare_out(std::move(out), q_in);
    if (return_lse)
        r.lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
    AttentionParams p = base_params(q, k, scale);
    p.v = v.data_ptr();
    set_strides(p.v_stride, v);
    p.o = r.out.data_ptr();
    set_strides(p.o_stride, r.out);
    p.lse = return_lse ? r.lse.data_ptr<float>() : nullptr;
    p.lists = idx.data_ptr<int32_t>();
    p.counts = cnt.data_ptr<int32_t>();
    p.list_stride = static_cast<int>(idx.size(1));
    p.block_q = static_cast<int>(block_q);
    p.block_k = static_cast<int>(block_k);
    launch(p, q, mode, Epilogue::Output, sm90);
    return r;
}

}  // namespace

bool device_has_kernel_image(int device, std::string* why_not) {
    // 0 = unknown, 1 = has an image, 2 = has none; the answer never changes within a process.
    static std::atomic<int> known[64] = {};
    const int cached = device >= 0 && device < 64 ? known[device].load() : 0;
    if (cached == 1) return true;
    int current = 0;
    check_cuda(cudaGetDevice(&current), "cudaGetDevice");
    if (current != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
    const cudaError_t err = probe_kernel_image();
    if (current != device) check_cuda(cudaSetDevice(current), "cudaSetDevice");
    if (err != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky-free error the probe left
        if (why_not)
            *why_not = std::string("no kernel image for this GPU: ") + cudaGetErrorString(err);
        if (device >= 0 && device < 64) known[device] = 2;
        return false;
    }
    if (device >= 0 && device < 64) known[device] = 1;
    return true;
}

AttentionResult block_sparse_attention(const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& block_indices,
                                       const at::Tensor& block_counts, int64_t block_q,
                                       int64_t block_k, double scale, bool return_lse,
                                       at::Tensor out, bool sm90) {
    return run_listed(q, k, v, block_indices, block_counts, block_q, block_k, scale, return_lse,
                      std::move(out), TileMode::BlockSparse, sm90);
}

AttentionResult gathered_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& key_indices, const at::Tensor& key_counts,
                                   int64_t block_q, double scale, bool return_lse, at::Tensor out,
                                   bool sm90) {
    return run_listed(q, k, v, key_indices, key_counts, block_q, kKeyTile, scale, return_lse,
                      std::move(out), TileMode::Gathered, sm90);
}

at::Tensor block_column_sum(const at::Tensor& q_in, const at::Tensor& k_in, int64_t block_q,
                            double scale, const at::Tensor& lse_in) {
    TORCH_CHECK(block_q % kQueryTile == 0, "CUDA column sum needs block_q a multiple of 64, got ",
                block_q);
    const c10::cuda::CUDAGuard guard(q_in.device());
    const auto q = kernel_layout(q_in), k = kernel_layout(k_in);
    const int64_t nqb = ceil_div(q.size(2), block_q);
    // Every entry is written by the keys-major kernel: no zero fill.
    auto colsum = at::empty({q.size(0), q.size(1), nqb, k.size(2)}, q.options().dtype(at::kFloat));
    AttentionParams p = base_params(q, k, scale);
    p.block_q = static_cast<int>(block_q);
    p.num_query_blocks = static_cast<int>(nqb);
    // The kernel reads lse_in at (b * H + h) * Lq + row: float32, contiguous.
    at::Tensor lse;
    if (lse_in.defined()) {
        lse = lse_in.to(at::kFloat).contiguous();
    } else {
        lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
        p.lse = lse.data_ptr<float>();
        launch(p, q, TileMode::Dense, Epilogue::LseOnly);
        p.lse = nullptr;
    }
    p.lse_in = lse.data_ptr<float>();
    p.colsum = colsum.data_ptr<float>();
    check_cuda(launch_column_sum_keys(p, static_cast<int>(q.size(3)),
                                      q.scalar_type() == at::kBFloat16, stream_of(q)),
               "column sum kernel launch");
    return colsum;
}

}  // namespace varscope::kernels::cuda
