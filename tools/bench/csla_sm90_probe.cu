// Standalone probe for the sm_90a CSLA and CS4A kernels (issue #6): no LibTorch, so it builds in
// seconds (here, with nvcc) and a device call spends its time measuring instead of building.
// Checks every schedule of both tile sources against a float64 CPU reference on small random
// shapes (tails, empty query blocks, mixed block sizes, strided q; gathered: counts on and off
// tile boundaries, invalid entries; poisoned outputs; two runs bitwise equal), then times them at
// SparVAR's Table-1 shape (Infinity-8B last scale, CSLA mask) at blocks 64 and 128 and CS4A at
// keep 0.2, C = 192 (as `varscope-cli bench cs4a`).
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I.
//     tools/bench/csla_sm90_probe.cu kernels/cuda/csla_attention_sm90_d{64,128}.cu
//     kernels/cuda/cs4a_attention_sm90_d{64,128}.cu kernels/block_list_order.cpp -o probe
//   (the list: tools/bench/probe_sources.txt)
//   probe [--profile] [--mask-only] [--dense] [--no-check] [--impls 06789abc] [--iters 30]
//     [--trace FILE]  (build with -DVARSCOPE_SM90_TRACE: per-item timeline of 11/12, CSV)
// --profile: one launch per schedule at block 64 only (for ncu -k regex:sm90_attention).
// --mask-only: the Table-1 mask's statistics (no GPU needed).
// --dense: also times Table 1's shape with every block active (the tile loop's own rate).
// --no-check: timings only. --impls: one character per schedule, a = 10, b = 11, c = 12.
// Exit code 1 when a check fails.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/block_list_order.h"
#include "kernels/cuda/attention_params.h"
#include "kernels/cuda/csla_attention_sm90.cuh"  // ws_fallbacks()

namespace varscope::kernels::cuda {
cudaError_t launch_csla_sm90_d64_bf16(const AttentionParams&, int impl, cudaStream_t);
cudaError_t launch_csla_sm90_d128_bf16(const AttentionParams&, int impl, cudaStream_t);
cudaError_t launch_cs4a_sm90_d64_bf16(const AttentionParams&, int impl, cudaStream_t);
cudaError_t launch_cs4a_sm90_d128_bf16(const AttentionParams&, int impl, cudaStream_t);
#ifdef VARSCOPE_SM90_TRACE
cudaError_t set_sm90_trace_d128(unsigned long long* buffer);
#endif
}  // namespace varscope::kernels::cuda

namespace vc = varscope::kernels::cuda;

namespace {

#define CHECK(x)                                                           \
    do {                                                                   \
        const cudaError_t e_ = (x);                                        \
        if (e_ != cudaSuccess) {                                           \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, \
                         cudaGetErrorString(e_));                          \
            std::exit(2);                                                  \
        }                                                                  \
    } while (0)

// Schedules (VARSCOPE_SM90_IMPL numbers); 1-5 were dropped; 7-12 are CSLA-only (CS4A runs 6).
const char* const kNames[] = {"serial",      "",   "",       "",         "",        "",
                              "single",      "ws", "ws-ovl", "ws-bound", "ws-ends", "persistent",
                              "persist-qreg"};
// --impls takes one character per schedule: digits, then a = 10.
int impl_of(char c) {
    return c >= 'a' ? c - 'a' + 10 : c - '0';
}

float bf(__nv_bfloat16 x) {
    return __bfloat162float(x);
}

// Block lists of a boolean block mask, in core's order (kernels/block_list_order.h), or ascending
// with VARSCOPE_PROBE_ASCENDING=1 (the order before 2026-11-26, for A/B rounds in one binary).
struct Lists {
    std::vector<int32_t> idx, cnt;
    int stride = 1;
};
Lists lists_of(const std::vector<uint8_t>& bm, int nqb, int nkb) {
    Lists l;
    for (int u = 0; u < nqb; ++u) {
        int c = 0;
        for (int j = 0; j < nkb; ++j) c += bm[static_cast<size_t>(u) * nkb + j];
        l.stride = std::max(l.stride, c);
    }
    l.idx.assign(static_cast<size_t>(nqb) * l.stride, -1);
    l.cnt.assign(nqb, 0);
    for (int u = 0; u < nqb; ++u)
        for (int j = 0; j < nkb; ++j)
            if (bm[static_cast<size_t>(u) * nkb + j])
                l.idx[static_cast<size_t>(u) * l.stride + l.cnt[u]++] = j;
    if (!std::getenv("VARSCOPE_PROBE_ASCENDING"))
        varscope::kernels::order_block_lists_for_shared_reads(l.idx.data(), l.cnt.data(), nqb,
                                                              l.stride);
    return l;
}

int round_half_even(int num, int den) {
    const int q = num / den, twice_rem = 2 * (num % den);
    return (twice_rem > den || (twice_rem == den && q % 2 == 1)) ? q + 1 : q;
}

// SparVAR's CSLA block mask at the last scale (as tools/bench/flex_attention_bench.py and
// core/accel/csla_mask.cpp build it: sinks = scales < 5, windows [3, 5, 7] for the last three
// key scales, 3 before; block = OR over its tokens).
std::vector<uint8_t> csla_block_mask(const std::vector<int>& pns, int block, int* lq_out,
                                     int* lk_out) {
    const int k = static_cast<int>(pns.size()) - 1, pq = pns[k];
    const int lq = pq * pq;
    int lk = 0;
    for (int p : pns) lk += p * p;
    const int nqb = (lq + block - 1) / block, nkb = (lk + block - 1) / block;
    std::vector<uint8_t> bm(static_cast<size_t>(nqb) * nkb, 0);
    const int windows[3] = {3, 5, 7};
    int col0 = 0;
    for (int h = 0; h <= k; ++h) {
        const int ph = pns[h];
        std::vector<std::vector<uint8_t>> near(pq, std::vector<uint8_t>(ph, 0));
        if (h < 5) {
            for (auto& r : near) std::fill(r.begin(), r.end(), 1);
        } else {
            const int dist = k - h;
            const int w = dist < 3 ? windows[2 - dist] : 3, r = w / 2;
            for (int x = 0; x < pq; ++x) {
                const int c = round_half_even(x * ph, pq);
                for (int y = std::max(0, c - r); y <= std::min(ph - 1, c + r); ++y) near[x][y] = 1;
            }
        }
        for (int xi = 0; xi < pq; ++xi)
            for (int xj = 0; xj < pq; ++xj) {
                const int qrow = xi * pq + xj;
                for (int yi = 0; yi < ph; ++yi) {
                    if (!near[xi][yi]) continue;
                    for (int yj = 0; yj < ph; ++yj)
                        if (near[xj][yj]) {
                            const int kcol = col0 + yi * ph + yj;
                            bm[static_cast<size_t>(qrow / block) * nkb + kcol / block] = 1;
                        }
                }
            }
        col0 += ph * ph;
    }
    *lq_out = lq;
    *lk_out = lk;
    return bm;
}

struct Problem {
    int b, h, lq, lk, d, bq, bk;
    bool strided_q;
    std::vector<__nv_bfloat16> q, k, v;  // q: (b, h, lq, d) or (b, lq, h, d) when strided
    Lists lists;
    bool gathered = false;  // lists of key rows (CS4A) instead of key blocks (CSLA)
};

struct Dev {
    __nv_bfloat16 *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
    float* lse = nullptr;
    int32_t *idx = nullptr, *cnt = nullptr;
};

vc::AttentionParams params_of(const Problem& pr, const Dev& dv) {
    vc::AttentionParams p;
    p.q = dv.q;
    p.k = dv.k;
    p.v = dv.v;
    p.o = dv.o;
    p.lse = dv.lse;
    if (pr.strided_q) {  // (batch, len, heads, head_dim) in memory
        const int64_t d = pr.d;
        p.q_stride[0] = int64_t{pr.lq} * pr.h * d;
        p.q_stride[1] = d;
        p.q_stride[2] = int64_t{pr.h} * d;
    } else {
        vc::set_contiguous_strides(p.q_stride, pr.h, pr.lq, pr.d);
    }
    vc::set_contiguous_strides(p.k_stride, pr.h, pr.lk, pr.d);
    vc::set_contiguous_strides(p.v_stride, pr.h, pr.lk, pr.d);
    vc::set_contiguous_strides(p.o_stride, pr.h, pr.lq, pr.d);
    p.batch = pr.b;
    p.heads = pr.h;
    p.len_q = pr.lq;
    p.len_k = pr.lk;
    p.scale_log2 = vc::scale_log2_of(1.0 / std::sqrt(static_cast<double>(pr.d)));
    p.lists = dv.idx;
    p.counts = dv.cnt;
    p.list_stride = pr.lists.stride;
    p.block_q = pr.bq;
    p.block_k = pr.bk;
    p.num_query_blocks = (pr.lq + pr.bq - 1) / pr.bq;
    p.kernel_variant = 3;
    return p;
}

Dev upload(const Problem& pr) {
    Dev dv;
    const size_t nq = pr.q.size(), nk = pr.k.size(), no = size_t(pr.b) * pr.h * pr.lq * pr.d;
    CHECK(cudaMalloc(&dv.q, nq * 2));
    CHECK(cudaMalloc(&dv.k, nk * 2));
    CHECK(cudaMalloc(&dv.v, nk * 2));
    CHECK(cudaMalloc(&dv.o, no * 2));
    CHECK(cudaMalloc(&dv.lse, size_t(pr.b) * pr.h * pr.lq * 4));
    CHECK(cudaMalloc(&dv.idx, pr.lists.idx.size() * 4));
    CHECK(cudaMalloc(&dv.cnt, pr.lists.cnt.size() * 4));
    CHECK(cudaMemcpy(dv.q, pr.q.data(), nq * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dv.k, pr.k.data(), nk * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dv.v, pr.v.data(), nk * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dv.idx, pr.lists.idx.data(), pr.lists.idx.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dv.cnt, pr.lists.cnt.data(), pr.lists.cnt.size() * 4, cudaMemcpyHostToDevice));
    return dv;
}

void release(Dev& dv) {
    cudaFree(dv.q), cudaFree(dv.k), cudaFree(dv.v), cudaFree(dv.o), cudaFree(dv.lse);
    cudaFree(dv.idx), cudaFree(dv.cnt);
}

void launch(const vc::AttentionParams& p, int d, int impl, bool gathered) {
    cudaError_t e;
    if (gathered)
        e = d == 64 ? vc::launch_cs4a_sm90_d64_bf16(p, impl, nullptr)
                    : vc::launch_cs4a_sm90_d128_bf16(p, impl, nullptr);
    else
        e = d == 64 ? vc::launch_csla_sm90_d64_bf16(p, impl, nullptr)
                    : vc::launch_csla_sm90_d128_bf16(p, impl, nullptr);
    CHECK(e);
}

// Runs once into NaN-poisoned outputs; returns O and LSE.
void run_once(const Problem& pr, const Dev& dv, int impl, std::vector<__nv_bfloat16>& o,
              std::vector<float>& lse) {
    const size_t no = size_t(pr.b) * pr.h * pr.lq * pr.d, nl = size_t(pr.b) * pr.h * pr.lq;
    CHECK(cudaMemset(dv.o, 0xFF, no * 2));  // bf16 0xFFFF: NaN
    CHECK(cudaMemset(dv.lse, 0xFF, nl * 4));
    launch(params_of(pr, dv), pr.d, impl, pr.gathered);
    CHECK(cudaDeviceSynchronize());
    o.resize(no);
    lse.resize(nl);
    CHECK(cudaMemcpy(o.data(), dv.o, no * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(lse.data(), dv.lse, nl * 4, cudaMemcpyDeviceToHost));
}

std::vector<__nv_bfloat16> randn_bf16(size_t n, std::mt19937& g) {
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<__nv_bfloat16> x(n);
    for (auto& e : x) e = __float2bfloat16(nd(g));
    return x;
}

// float64 reference: O (b, h, lq, d) and LSE; rows with no key get O = 0, LSE = -inf.
void reference(const Problem& pr, std::vector<double>& o, std::vector<double>& lse) {
    const int d = pr.d;
    o.assign(size_t(pr.b) * pr.h * pr.lq * d, 0.0);
    lse.assign(size_t(pr.b) * pr.h * pr.lq, -INFINITY);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    std::vector<double> sc(pr.lk);
    std::vector<int> keys;
    for (int b = 0; b < pr.b; ++b)
        for (int h = 0; h < pr.h; ++h)
            for (int i = 0; i < pr.lq; ++i) {
                const int qb = i / pr.bq;
                keys.clear();
                for (int j = 0; j < pr.lists.cnt[qb]; ++j) {
                    const int kb = pr.lists.idx[size_t(qb) * pr.lists.stride + j];
                    if (pr.gathered) {  // invalid entries are ignored (as the reference does)
                        if (kb >= 0 && kb < pr.lk) keys.push_back(kb);
                        continue;
                    }
                    for (int c = kb * pr.bk; c < std::min(pr.lk, (kb + 1) * pr.bk); ++c)
                        keys.push_back(c);
                }
                if (keys.empty()) continue;
                const size_t qoff = pr.strided_q ? ((size_t(b) * pr.lq + i) * pr.h + h) * d
                                                 : ((size_t(b) * pr.h + h) * pr.lq + i) * d;
                double mx = -INFINITY;
                for (size_t t = 0; t < keys.size(); ++t) {
                    const size_t koff = ((size_t(b) * pr.h + h) * pr.lk + keys[t]) * d;
                    double s = 0;
                    for (int e = 0; e < d; ++e)
                        s += double(bf(pr.q[qoff + e])) * bf(pr.k[koff + e]);
                    sc[t] = s * scale;
                    mx = std::max(mx, sc[t]);
                }
                double sum = 0;
                for (size_t t = 0; t < keys.size(); ++t) sum += (sc[t] = std::exp(sc[t] - mx));
                double* out = &o[((size_t(b) * pr.h + h) * pr.lq + i) * d];
                for (size_t t = 0; t < keys.size(); ++t) {
                    const size_t voff = ((size_t(b) * pr.h + h) * pr.lk + keys[t]) * d;
                    for (int e = 0; e < d; ++e) out[e] += sc[t] / sum * bf(pr.v[voff + e]);
                }
                lse[(size_t(b) * pr.h + h) * pr.lq + i] = mx + std::log(sum);
            }
}

// rising: keys scaled by a ramp (x1 to x12 along the key axis), so that scores of later tiles
// pass the exponent base by far more than 2^16 in P and the base must move (schedule 9).
Problem random_problem(int b, int h, int lq, int lk, int d, int bq, int bk, bool strided,
                       std::mt19937& g, bool rising = false) {
    Problem pr{b, h, lq, lk, d, bq, bk, strided, {}, {}, {}, {}};
    pr.q = randn_bf16(size_t(b) * h * lq * d, g);
    pr.k = randn_bf16(size_t(b) * h * lk * d, g);
    if (rising)
        for (size_t i = 0; i < pr.k.size(); ++i) {
            const int key = static_cast<int>((i / d) % lk);
            pr.k[i] = __float2bfloat16(bf(pr.k[i]) * (1.f + 11.f * key / std::max(lk - 1, 1)));
        }
    pr.v = randn_bf16(size_t(b) * h * lk * d, g);
    const int nqb = (lq + bq - 1) / bq, nkb = (lk + bk - 1) / bk;
    std::vector<uint8_t> bm(size_t(nqb) * nkb, 0);
    std::bernoulli_distribution keep(0.4);
    for (int u = 0; u < nqb; ++u) {
        if (u % 3 == 1) continue;  // empty query blocks
        for (int j = 0; j < nkb; ++j) bm[size_t(u) * nkb + j] = j == 0 || keep(g);
    }
    pr.lists = lists_of(bm, nqb, nkb);
    // Random order within each list (the kernels must not rely on ascending lists).
    for (int u = 0; u < nqb; ++u)
        std::shuffle(pr.lists.idx.begin() + size_t(u) * pr.lists.stride,
                     pr.lists.idx.begin() + size_t(u) * pr.lists.stride + pr.lists.cnt[u], g);
    return pr;
}

// CS4A lists: distinct random key rows; counts off and on 64-key tile boundaries, every third
// block empty, two invalid entries (-1, past lk) inside the count of every fourth.
Problem random_gathered(int b, int h, int lq, int lk, int d, int bq, bool strided,
                        std::mt19937& g) {
    Problem pr{b, h, lq, lk, d, bq, 64, strided, {}, {}, {}, {}, true};
    pr.q = randn_bf16(size_t(b) * h * lq * d, g);
    pr.k = randn_bf16(size_t(b) * h * lk * d, g);
    pr.v = randn_bf16(size_t(b) * h * lk * d, g);
    const int nqb = (lq + bq - 1) / bq, widest = std::max(2, lk * 3 / 10 + 70);
    pr.lists.stride = widest;
    pr.lists.idx.assign(size_t(nqb) * widest, -1);
    pr.lists.cnt.assign(nqb, 0);
    std::vector<int32_t> perm(lk);
    for (int u = 0; u < nqb; ++u) {
        if (u % 3 == 1) continue;
        int n = std::min(lk, 1 + int(g() % widest));
        if (u % 3 == 2 && n >= 64) n -= n % 64;
        for (int j = 0; j < lk; ++j) perm[j] = j;
        std::shuffle(perm.begin(), perm.end(), g);
        int32_t* row = &pr.lists.idx[size_t(u) * widest];
        std::copy(perm.begin(), perm.begin() + n, row);
        if (u % 4 == 0 && n >= 3) row[n / 2] = -1, row[n - 1] = lk + 5;
        pr.lists.cnt[u] = n;
    }
    return pr;
}

int check_all(const std::string& impls, std::mt19937& g) {
    struct S {
        int b, h, lq, lk, d;
    };
    const S shapes[] = {{1, 2, 64, 64, 64},    {2, 3, 200, 333, 64},   {1, 2, 130, 1000, 128},
                        {2, 1, 17, 70, 128},   {1, 2, 256, 2048, 128}, {1, 1, 192, 900, 64},
                        {1, 1, 320, 4200, 128}};
    // Block pairs; {192, 0}: gathered (CS4A) lists for 192-row query blocks, {64, 0} for 64.
    const int blocks[6][2] = {{64, 64}, {128, 128}, {128, 64}, {64, 128}, {64, 0}, {192, 0}};
    int failures = 0, cases = 0;
    std::vector<double> worst(16, 0.0), worst_ratio(16, 0.0);
    for (const auto& s : shapes)
        for (const auto& bb : blocks)
            for (const bool strided : {false, true}) {
                // CSLA: the strided cases also with rising scores (see random_problem).
                const Problem pr =
                    bb[1] == 0 ? random_gathered(s.b, s.h, s.lq, s.lk, s.d, bb[0], strided, g)
                               : random_problem(s.b, s.h, s.lq, s.lk, s.d, bb[0], bb[1], strided, g,
                                                strided);
                std::vector<double> ro, rl;
                reference(pr, ro, rl);
                Dev dv = upload(pr);
                double err0 = NAN;
                for (const char ic : impls) {
                    const int impl = impl_of(ic);
                    if (pr.gathered && impl >= 7) continue;  // CSLA-only schedules
                    std::vector<__nv_bfloat16> o, o2;
                    std::vector<float> lse, lse2;
                    run_once(pr, dv, impl, o, lse);
                    run_once(pr, dv, impl, o2, lse2);
                    double num = 0, den = 0, lse_err = 0;
                    bool bad = std::memcmp(o.data(), o2.data(), o.size() * 2) != 0;
                    if (bad) std::printf("  not deterministic\n");
                    const size_t rows = size_t(pr.b) * pr.h * pr.lq;
                    for (size_t r = 0; r < rows; ++r) {
                        const bool empty = std::isinf(rl[r]);
                        for (int e = 0; e < pr.d; ++e) {
                            const double x = bf(o[r * pr.d + e]), y = ro[r * pr.d + e];
                            if (empty) {
                                if (x != 0.0) bad = true;
                            } else {
                                if (!std::isfinite(x)) bad = true;
                                num += (x - y) * (x - y);
                                den += y * y;
                            }
                        }
                        if (empty) {
                            if (!(std::isinf(lse[r]) && lse[r] < 0)) bad = true;
                        } else {
                            lse_err = std::max(lse_err, std::fabs(lse[r] - rl[r]));
                            if (!std::isfinite(lse[r])) bad = true;
                        }
                    }
                    const double err = std::sqrt(num / den);
                    if (impl == 0) err0 = err;
                    // bf16 output: a few 1e-3 (torch's own bf16 SDPA lands at 2-4e-3 here).
                    if (!(err <= 8e-3) || !(lse_err <= 2e-2)) bad = true;
                    worst[impl] = std::max(worst[impl], err);
                    if (err0 > 0) worst_ratio[impl] = std::max(worst_ratio[impl], err / err0);
                    ++cases;
                    if (bad) {
                        ++failures;
                        std::printf(
                            "FAIL %s impl %d (%s) b%d h%d lq%d lk%d d%d block %dx%d%s: err %.2e "
                            "lse %.2e\n",
                            pr.gathered ? "cs4a" : "csla", impl, kNames[impl], s.b, s.h, s.lq, s.lk,
                            s.d, bb[0], bb[1], strided ? " strided" : "", err, lse_err);
                    }
                }
                release(dv);
            }
    std::printf("checks: %d cases, %d failed\n", cases, failures);
    for (const char ic : impls) {
        const int impl = impl_of(ic);
        std::printf("  impl %d %-9s worst rel err %.2e (worst ratio to impl 0: %.2f)\n", impl,
                    kNames[impl], worst[impl], worst_ratio[impl]);
    }
    return failures;
}

double median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Prints the mask's statistics; returns the FLOPs of its active tiles.
double mask_stats(const char* name, const std::vector<uint8_t>& bm, const Lists& lists, int lq,
                  int lk, int block, int B, int H, int D) {
    const int nqb = (lq + block - 1) / block, nkb = (lk + block - 1) / block;
    double active = 0, blocks_on = 0, listed = 0, unions = 0;
    for (int u = 0; u < nqb; ++u)
        for (int j = 0; j < nkb; ++j)
            if (bm[size_t(u) * nkb + j]) {
                blocks_on += 1;
                active += double(std::min(lq, (u + 1) * block) - u * block) *
                          (std::min(lk, (j + 1) * block) - j * block);
            }
    for (int u = 0; u < nqb; ++u) listed += lists.cnt[u];
    for (int u = 0; u < nqb; u += 2)  // pair CTAs at block 64 (at 128: one block per CTA)
        for (int j = 0; j < nkb; ++j)
            unions += bm[size_t(u) * nkb + j] || (u + 1 < nqb && bm[size_t(u + 1) * nkb + j]);
    if (block == 128) unions = listed;
    const double flops = 4.0 * B * H * active * D;
    std::printf(
        "%s block %d: q %d kv %d, block sparsity %.2f %%, %.1f GFLOP, "
        "mean list %.1f blocks, pair-CTA union %.0f vs listed %.0f (%.3f)\n",
        name, block, lq, lk, 100.0 * (1 - blocks_on / (double(nqb) * nkb)), flops * 1e-9,
        listed / nqb, unions, listed, unions / listed);
    return flops;
}

struct Config {
    const char* name;
    std::vector<int> pns;
    int batch, heads, head_dim;
};
// As app/cli's bench configs: SparVAR's Table 1 (Infinity-8B 1024px last scale) and VAR-d30's
// 256px / 512px last scales (batch 2: the CFG pair).
const Config kConfigs[] = {
    {"infinity-8b-1024", {1, 2, 4, 6, 8, 12, 16, 20, 24, 32, 40, 48, 64}, 1, 24, 128},
    {"var-d30-256", {1, 2, 3, 4, 5, 6, 8, 10, 13, 16}, 2, 30, 64},
    {"var-d30-512", {1, 2, 3, 4, 6, 9, 13, 18, 24, 32}, 2, 30, 64}};

// Times each schedule on one problem (outputs compared with the first schedule's); returns the
// number of schedules whose output is not finite or differs from the first's by > 5e-3.
int time_impls(const Problem& pr, const Dev& dv, const std::string& impls, int iters, bool profile,
               double flops, char* flush, size_t flush_bytes) {
    int failures = 0;
    const int D = pr.d;
    const auto p = params_of(pr, dv);
    std::vector<__nv_bfloat16> ref_o, o;
    std::vector<float> ref_l, l;
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    for (const char ic : impls) {
        const int impl = impl_of(ic);
        if (pr.gathered && impl >= 7) continue;  // CSLA-only schedules
        if (profile) {
            launch(p, D, impl, pr.gathered);
            CHECK(cudaDeviceSynchronize());
            continue;
        }
        run_once(pr, dv, impl, o, l);
        double num = 0, den = 0;
        bool finite = true;
        if (ref_o.empty()) ref_o = o, ref_l = l;
        for (size_t i = 0; i < o.size(); ++i) {
            const double x = bf(o[i]), y = bf(ref_o[i]);
            finite = finite && std::isfinite(x);
            num += (x - y) * (x - y);
            den += y * y;
        }
        const double diff = std::sqrt(num / den);
        if (!finite || !(diff <= 5e-3)) ++failures;
        for (int i = 0; i < 10; ++i) launch(p, D, impl, pr.gathered);
        std::vector<float> ms(iters);
        for (int i = 0; i < iters; ++i) {
            CHECK(cudaMemsetAsync(flush, i & 0xFF, flush_bytes));
            CHECK(cudaEventRecord(e0));
            launch(p, D, impl, pr.gathered);
            CHECK(cudaEventRecord(e1));
            CHECK(cudaEventSynchronize(e1));
            CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
        }
        const double med = median(ms);
        std::printf(
            "  %s impl %d %-9s %.4f ms (min %.4f max %.4f)  %5.0f TFLOP/s  vs impl %c: rel "
            "diff %.1e%s\n",
            pr.gathered ? "cs4a" : "csla", impl, kNames[impl], med,
            *std::min_element(ms.begin(), ms.end()), *std::max_element(ms.begin(), ms.end()),
            flops / (med * 1e-3) / 1e12, impls[0], diff, finite ? "" : "  NON-FINITE");
    }
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
    return failures;
}

int bench(const std::string& impls, int iters, bool profile, bool dense, std::mt19937& g) {
    int failures = 0;
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    char* flush = nullptr;
    const size_t flush_bytes = size_t(prop.l2CacheSize) * 2;
    CHECK(cudaMalloc(&flush, flush_bytes));
    for (const Config& cfg : kConfigs) {
        if (profile && cfg.head_dim != 128) continue;
        const std::vector<int>& pns = cfg.pns;
        const int B = cfg.batch, H = cfg.heads, D = cfg.head_dim;
        std::vector<__nv_bfloat16> q, k, v;
        for (const int block : profile ? std::vector<int>{64} : std::vector<int>{64, 128}) {
            int lq = 0, lk = 0;
            const auto bm = csla_block_mask(pns, block, &lq, &lk);
            const int nqb = (lq + block - 1) / block, nkb = (lk + block - 1) / block;
            if (q.empty()) {
                q = randn_bf16(size_t(B) * H * lq * D, g);
                k = randn_bf16(size_t(B) * H * lk * D, g);
                v = randn_bf16(size_t(B) * H * lk * D, g);
            }
            Problem pr{B, H, lq, lk, D, block, block, false, q, k, v, lists_of(bm, nqb, nkb)};
            const double flops = mask_stats(cfg.name, bm, pr.lists, lq, lk, block, B, H, D);
            Dev dv = upload(pr);
            failures += time_impls(pr, dv, impls, iters, profile, flops, flush, flush_bytes);
            release(dv);
            if (dense && block == 64 && D == 128) {  // every block active: the tile loop alone
                const std::vector<uint8_t> all(bm.size(), 1);
                Problem pd{B, H, lq, lk, D, block, block, false, q, k, v, lists_of(all, nqb, nkb)};
                const double fd = mask_stats("dense", all, pd.lists, lq, lk, block, B, H, D);
                Dev dd = upload(pd);
                failures += time_impls(pd, dd, impls, iters, profile, fd, flush, flush_bytes);
                release(dd);
            }
        }
        if (profile) continue;
        // CS4A at the last scale, as `varscope-cli bench cs4a`: each 192-row query block keeps the
        // sink tokens (scales 1-5) plus a random 20 % of the other keys, ascending.
        {
            const int k_last = static_cast<int>(pns.size()) - 1, lq = pns[k_last] * pns[k_last];
            int lk = 0, sinks = 0;
            for (size_t i = 0; i < pns.size(); ++i) lk += pns[i] * pns[i];
            for (int i = 0; i < 5; ++i) sinks += pns[i] * pns[i];
            const int C = 192, nqb = (lq + C - 1) / C;
            const int keep_n = std::max(sinks, static_cast<int>(std::lround(0.2 * lk)));
            Problem pr{B, H, lq, lk, D, C, 64, false, q, k, v, {}, true};
            pr.lists.stride = keep_n;
            pr.lists.idx.assign(size_t(nqb) * keep_n, -1);
            pr.lists.cnt.assign(nqb, keep_n);
            std::vector<int32_t> rest(lk - sinks);
            for (int u = 0; u < nqb; ++u) {
                for (int j = 0; j < lk - sinks; ++j) rest[j] = sinks + j;
                std::shuffle(rest.begin(), rest.end(), g);
                int32_t* row = &pr.lists.idx[size_t(u) * keep_n];
                for (int j = 0; j < sinks; ++j) row[j] = j;
                std::copy(rest.begin(), rest.begin() + (keep_n - sinks), row + sinks);
                std::sort(row, row + keep_n);
            }
            const double flops = 4.0 * B * H * double(lq) * keep_n * D;
            std::printf("%s cs4a keep %.3f C %d: q %d kv %d, %d keys per block, %.1f GFLOP\n",
                        cfg.name, double(keep_n) / lk, C, lq, lk, keep_n, flops * 1e-9);
            Dev dv = upload(pr);
            failures += time_impls(pr, dv, impls, iters, profile, flops, flush, flush_bytes);
            release(dv);
        }
    }
    cudaFree(flush);
    return failures;
}

#ifdef VARSCOPE_SM90_TRACE
// --trace FILE: the persistent schedules' per-item timeline at Table 1, block 64 (sparse mask,
// then every block active): three launches each, after warm-ups and an L2 flush, as CSV rows
// (case, run, lin, smid, cta, tiles, five globaltimer stamps in ns from the launch's first, the
// clock cycles waited for K and for V, the clock cycles of the tile loop).
// tools/bench/csla_trace_summary.py reads it.
int trace(const std::string& impls, const char* path, std::mt19937& g) {
    constexpr int kSlots = vc::sm90::kTraceSlots;
    const Config& cfg = kConfigs[0];
    const int B = cfg.batch, H = cfg.heads, D = cfg.head_dim, block = 64;
    int lq = 0, lk = 0;
    const auto bm = csla_block_mask(cfg.pns, block, &lq, &lk);
    const int nqb = (lq + block - 1) / block, nkb = (lk + block - 1) / block;
    const auto q = randn_bf16(size_t(B) * H * lq * D, g), k = randn_bf16(size_t(B) * H * lk * D, g),
               v = randn_bf16(size_t(B) * H * lk * D, g);
    FILE* f = std::fopen(path, "w");
    if (!f) {
        std::printf("cannot write %s\n", path);
        return 1;
    }
    std::fprintf(f, "case,impl,run,lin,smid,cta,tiles,t0,t1,t2,t3,t4,kwait,vwait,loop_cycles\n");
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    char* flush = nullptr;
    const size_t flush_bytes = size_t(prop.l2CacheSize) * 2;
    CHECK(cudaMalloc(&flush, flush_bytes));
    const int items = nqb * H * B;
    unsigned long long* buf = nullptr;
    CHECK(cudaMalloc(&buf, sizeof(unsigned long long) * kSlots * items));
    CHECK(vc::set_sm90_trace_d128(buf));
    std::vector<unsigned long long> host(size_t(kSlots) * items);
    for (const bool dense : {false, true}) {
        const std::vector<uint8_t> all(bm.size(), 1);
        const Lists lists = lists_of(dense ? all : bm, nqb, nkb);
        Problem pr{B, H, lq, lk, D, block, block, false, q, k, v, lists};
        Dev dv = upload(pr);
        const auto p = params_of(pr, dv);
        for (const char ic : impls) {
            const int impl = impl_of(ic);
            if (impl < 11) continue;
            for (int i = 0; i < 10; ++i) launch(p, D, impl, false);
            for (int run = 0; run < 3; ++run) {
                CHECK(cudaMemset(buf, 0, sizeof(unsigned long long) * kSlots * items));
                CHECK(cudaMemsetAsync(flush, run, flush_bytes));
                launch(p, D, impl, false);
                CHECK(cudaDeviceSynchronize());
                CHECK(cudaMemcpy(host.data(), buf, host.size() * sizeof(unsigned long long),
                                 cudaMemcpyDeviceToHost));
                unsigned long long t_min = ~0ull;
                for (int l = 0; l < items; ++l) t_min = std::min(t_min, host[size_t(l) * kSlots]);
                for (int l = 0; l < items; ++l) {
                    const unsigned long long* r = &host[size_t(l) * kSlots];
                    std::fprintf(f, "%s,%d,%d,%d,%llu,%llu,%llu", dense ? "dense" : "sparse", impl,
                                 run, l, r[5] >> 32, (r[5] >> 16) & 0xFFFF, r[5] & 0xFFFF);
                    for (int j = 0; j < 5; ++j) std::fprintf(f, ",%lld", (long long)(r[j] - t_min));
                    std::fprintf(f, ",%llu,%llu,%llu\n", r[6], r[7], r[8]);
                }
            }
        }
        release(dv);
    }
    CHECK(vc::set_sm90_trace_d128(nullptr));
    std::fclose(f);
    cudaFree(buf);
    cudaFree(flush);
    std::printf("trace written to %s\n", path);
    return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
    bool profile = false, dense = false, no_check = false;
    std::string impls = "06789abc";
    int iters = 30;
    const char* trace_path = nullptr;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--mask-only")) {
            for (const Config& cfg : kConfigs)
                for (const int block : {64, 128}) {
                    int lq = 0, lk = 0;
                    const auto bm = csla_block_mask(cfg.pns, block, &lq, &lk);
                    mask_stats(cfg.name, bm,
                               lists_of(bm, (lq + block - 1) / block, (lk + block - 1) / block), lq,
                               lk, block, cfg.batch, cfg.heads, cfg.head_dim);
                }
            return 0;
        }
        if (!std::strcmp(argv[i], "--profile"))
            profile = true;
        else if (!std::strcmp(argv[i], "--no-check"))
            no_check = true;
        else if (!std::strcmp(argv[i], "--dense"))
            dense = true;
        else if (!std::strcmp(argv[i], "--impls") && i + 1 < argc)
            impls = argv[++i];
        else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = std::atoi(argv[++i]);
        else if (!std::strcmp(argv[i], "--trace") && i + 1 < argc)
            trace_path = argv[++i];
    }
    int dev_count = 0;
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
        std::printf("no CUDA device: nothing to do\n");
        return 0;
    }
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s, cc %d.%d, %d SMs, L2 %d MB\n", prop.name, prop.major, prop.minor,
                prop.multiProcessorCount, prop.l2CacheSize >> 20);
    if (prop.major != 9) {
        std::printf("not a Hopper GPU: nothing to do\n");
        return 0;
    }
    std::mt19937 g(6);
    if (trace_path != nullptr) {
#ifdef VARSCOPE_SM90_TRACE
        return trace(impls, trace_path, g);
#else
        std::printf("--trace needs a build with -DVARSCOPE_SM90_TRACE\n");
        return 1;
#endif
    }
    int failures = 0;
    if (!profile && !no_check) failures += check_all(impls, g);
    failures += bench(impls, iters, profile, dense, g);
    // 7-12 fall back to 6 where no tensor map can be made: then they were not what ran.
    const int fallbacks = varscope::kernels::cuda::sm90::ws_fallbacks().load();
    std::printf("schedule 7-12 fallbacks to 6: %d\n", fallbacks);
    failures += fallbacks;
    std::printf("%s\n", failures ? "FAILED" : "OK");
    return failures ? 1 : 0;
}
