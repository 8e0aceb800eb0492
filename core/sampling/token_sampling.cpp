#include "core/sampling/token_sampling.h"

#include <ATen/ATen.h>

#include <mutex>

namespace varscope {

std::optional<at::Generator> seeded_generator(const at::Device& device,
                                              std::optional<uint64_t> seed) {
    if (!seed) return std::nullopt;
    at::Generator gen = at::globalContext().defaultGenerator(device).clone();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(*seed);
    return gen;
}

at::Tensor sample_tokens(at::Tensor& logits, const TokenSamplingOptions& opt,
                         std::optional<at::Generator> gen) {
    const int64_t B = logits.size(0), l = logits.size(1), V = logits.size(2);
    if (opt.top_k > 0 && opt.top_k < V) {
        auto kth = std::get<0>(logits.topk(opt.top_k, -1, true, false)).amin(-1, true);
        logits.masked_fill_(logits.lt(kth), -INFINITY);
    }
    if (opt.top_p > 0) {
        auto [sorted, order] = logits.sort(-1, /*descending=*/false);
        auto drop = sorted.softmax(-1).cumsum_(-1).le(1.0 - opt.top_p);
        drop.narrow(-1, V - 1, 1).fill_(false);  // always keep the most likely token
        logits.masked_fill_(drop.scatter(-1, order, drop), -INFINITY);
    }
    auto probs = logits.softmax(-1).view({-1, V});
    return at::multinomial(probs, 1, /*replacement=*/true, gen).view({B, l});
}

at::Tensor guide(const at::Tensor& logits, double t) {
    const int64_t B = logits.size(0) / 2;
    return logits.narrow(0, 0, B).mul(1.0 + t) - logits.narrow(0, B, B).mul(t);
}

double guidance_at_scale(double cfg, int64_t si, int64_t num_scales) {
    return num_scales > 1 ? cfg * static_cast<double>(si) / static_cast<double>(num_scales - 1)
                          : 0.0;
}

}  // namespace varscope
