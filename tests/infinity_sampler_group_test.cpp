// Grouped steps (LazyVAR's parallel group decoding) in Infinity's sampling loop: a group of one
// scale is the baseline bit for bit; a group of p > 1 scales gives the logits of a reference
// written here from the model's public pieces (a full-sequence forward: each group scale's
// input taken from the same summed codes, its own level embedding and RoPE rows, the
// training-time block-causal mask, guidance and tau per scale), with and without pruned rows.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <set>

#include "core/accel/accel_config.h"
#include "core/sampling/infinity_sampler.h"
#include "tests/tiny_models.h"

using namespace varscope;

namespace {

constexpr int64_t kBits = 4;

InfinityConfig tiny_config() {
    auto c = InfinityConfig::infinity_2b();
    c.depth = 3, c.embed_dim = 64, c.num_heads = 4, c.mlp_hidden = 128, c.text_channels = 128;
    c.text_maxlen = 8, c.pool_heads = 1, c.codebook_dim = kBits;
    return c;
}

InfinityTransformer tiny_model() {
    auto m = random_infinity(tiny_config(), 1);
    varscope::testing::randomise(*m, 2);  // the official init hides most of a block's work
    return m;
}

bsq::BsqQuantConfig quant() {
    bsq::BsqQuantConfig q;
    q.codebook_dim = kBits;
    return q;
}

const InfinitySchedule& schedule() {
    static const auto s = infinity_schedule(1.0, "0.06M");  // 1 .. 16 x 16, 7 square scales
    return s;
}

InfinityText text() {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
    return {at::randn({7, 128}, gen), {3, 4}};
}

// Groups `p` scales from `first` on; sets the given rows per scale; keeps the group's guided
// logits and segments.
struct GroupHooks : SamplingHooks {
    int64_t first = 0, p = 1;
    std::map<int64_t, at::Tensor> rows;
    at::Tensor group_logits;
    std::vector<ScaleSegment> segments;
    int64_t group_size(const ScaleContext& c) override { return c.scale == first ? p : 1; }
    void on_scale_begin(ScaleContext& c) override {
        for (auto& seg : c.segments)
            if (rows.count(seg.scale)) seg.rows = rows.at(seg.scale);
    }
    void on_logits(const ScaleContext& c, at::Tensor& logits) override {
        if (c.scale != first) return;
        group_logits = logits.clone();
        segments = c.segments;
    }
};

// The reference: the sequence of every scale up to the group's last, as one forward pass with
// the block-causal mask over the rows' scales (InfinityBlockImpl::forward, plain attention).
// Scales before the group get the inputs the sampler gave them (from its bits); the group's
// scales all read the summed codes after scale first - 1, restricted to their rows. Returns
// the guided, tempered logits of the group's rows (B, rows, 2d), scale after scale.
at::Tensor reference_group_logits(const InfinityTransformer& model, const InfinityText& txt,
                                  const InfinitySampleOptions& o,
                                  const std::vector<at::Tensor>& bits, const GroupHooks& g,
                                  bool causal_in_group = true) {
    const auto& s = schedule();
    const auto& m = *model;
    const int64_t B = txt.batch(), S = s.num_scales(), last = g.first + g.p - 1;
    const auto q = quant();
    const bsq::Size3 final_size{1, s.scales.back()[0], s.scales.back()[1]};
    at::Tensor summed = at::zeros({B, kBits, 1, final_size[1], final_size[2]})
                            .contiguous(at::MemoryFormat::ChannelsLast3d);
    auto input_codes = [&](int64_t si) {
        const int64_t h = s.scales[si][0], w = s.scales[si][1];
        return bsq::interpolate_up(summed, {1, h, w}, q)
            .squeeze(2)
            .reshape({B, kBits, h * w})
            .permute({0, 2, 1});
    };
    const auto c = m.condition(m.with_unconditional(txt));
    const auto rope_all = infinity_rope(s, tiny_config().head_dim());
    std::vector<at::Tensor> xs, ropes;
    std::vector<int64_t> scale_of_row;
    for (int64_t si = 0; si <= last; ++si) {
        at::Tensor x;
        if (si == 0) {
            x = m.start_tokens(c) + m.level_embedding(0);
        } else {
            x = m.embed_tokens(input_codes(si)).repeat({2, 1, 1}) + m.level_embedding(si);
        }
        at::Tensor r = rope_all.narrow(1, s.scale_begin(si), s.tokens(si));
        if (g.rows.count(si)) {
            x = x.index_select(1, g.rows.at(si));
            r = r.index_select(1, g.rows.at(si));
        }
        xs.push_back(x);
        ropes.push_back(r);
        scale_of_row.insert(scale_of_row.end(), x.size(1), si);
        // Scales before the group fold their bits in; the group's scales all read the codes
        // as they stand after scale first - 1.
        if (si < g.first) {
            auto codes = bsq::bits_to_codes(bits[si].to(at::kLong), q);
            summed.add_(si != S - 1 ? bsq::interpolate_up(codes, final_size, q) : codes);
        }
    }
    at::Tensor x = at::cat(xs, 1);
    const at::Tensor rope = at::cat(ropes, 1);
    // causal_in_group = false: the group's rows see each other (a wrong reference, to show
    // that the test sees the mask).
    std::vector<int64_t> block_of_row;
    for (int64_t si : scale_of_row)
        block_of_row.push_back(causal_in_group ? si : std::min(si, g.first));
    const auto id = at::tensor(block_of_row, at::kLong);
    const at::Tensor mask = at::zeros({id.numel(), id.numel()})
                                .masked_fill(id.unsqueeze(1) < id.unsqueeze(0),
                                             -std::numeric_limits<double>::infinity())
                                .view({1, 1, id.numel(), id.numel()});
    const AttendFn attend = [&](const at::Tensor& qq, const at::Tensor& k, const at::Tensor& v) {
        return attention_eager(qq, k, v, 1.0, mask);
    };
    auto guidance_rows = [&] {  // (1, L, 1): each row's scale's guidance
        std::vector<double> gs;
        for (int64_t si : scale_of_row) gs.push_back(o.cfg_list.empty() ? o.cfg : o.cfg_list[si]);
        return at::tensor(gs, at::kDouble).to(at::kFloat).view({1, -1, 1});
    };
    const std::set<int64_t> insertion(o.cfg_insertion_layer.begin(), o.cfg_insertion_layer.end());
    for (int64_t i = 0; i < tiny_config().depth; ++i) {
        x = m.block(i).forward(x, c.gss, c.cross[i], c.text_mask, rope, attend);
        if (insertion.count(i - tiny_config().depth)) {
            const auto gr = guidance_rows();
            const auto mixed = x.narrow(0, 0, B) * gr + x.narrow(0, B, B) * (1 - gr);
            x = at::cat({mixed, mixed}, 0);
        }
    }
    at::Tensor logits = m.logits(x, c.cond_BD);
    std::vector<double> inv_tau;
    for (int64_t si : scale_of_row)
        inv_tau.push_back(1.0 / (o.tau_list.empty() ? o.tau : o.tau_list[si]));
    logits = logits * at::tensor(inv_tau, at::kDouble).to(at::kFloat).view({1, -1, 1});
    if (insertion.count(0)) {
        const auto gr = guidance_rows();
        logits = logits.narrow(0, 0, B) * gr + logits.narrow(0, B, B) * (1 - gr);
    } else {
        logits = logits.narrow(0, 0, B);
    }
    int64_t group_begin = 0;
    while (scale_of_row[group_begin] < g.first) ++group_begin;
    return logits.narrow(1, group_begin, logits.size(1) - group_begin);
}

double rel_error(const at::Tensor& a, const at::Tensor& b) {
    return ((a - b).norm() / b.norm()).item<double>();
}

InfinitySampleOptions options() {
    InfinitySampleOptions o;
    o.seed = 4;
    o.top_k = 0;
    o.top_p = 0.0;  // the full distribution: no ties to hide differences
    o.cfg_list = {3.0, 3.0, 2.5, 2.5, 3.0, 2.0, 4.0};  // a different guidance per group scale
    o.tau_list = {1.0, 1.0, 0.9, 0.9, 0.8, 1.2, 0.7};
    return o;
}

}  // namespace

TEST(InfinityGroupedSteps, AGroupOfOneIsTheBaselineBitForBit) {
    c10::InferenceMode guard;
    InfinitySampler sampler(tiny_model(), quant());
    const auto o = options();
    const auto base = sampler.sample(text(), schedule(), o);
    GroupHooks hooks;
    hooks.first = 4, hooks.p = 1;
    const auto r = sampler.sample(text(), schedule(), o, &hooks);
    ASSERT_EQ(r.bits.size(), base.bits.size());
    for (size_t si = 0; si < r.bits.size(); ++si)
        EXPECT_TRUE(at::equal(r.bits[si], base.bits[si])) << "scale " << si;
    EXPECT_TRUE(at::equal(r.summed_codes, base.summed_codes));
    // LazyVAR's group size 1 without pruning (its off setting) too.
    const auto view = infinity_hook_view(tiny_config(), schedule());
    const auto lazy = build_accelerators(
        AccelConfig::from_argument(
            R"({"lazyvar": {"enabled": true, "start_scale": 4, "group_size": 1, "ratios": [1]}})"),
        *view);
    const auto l = sampler.sample(text(), schedule(), o, lazy.get());
    for (size_t si = 0; si < l.bits.size(); ++si)
        EXPECT_TRUE(at::equal(l.bits[si], base.bits[si])) << "lazyvar off, scale " << si;
}

// Groups at the end of the schedule (the last scale's codes are added unscaled) and in the
// middle (the step after the group reads the codes of every group scale), dense and pruned,
// with guidance on the logits and at a layer's output.
TEST(InfinityGroupedSteps, AGroupGivesTheReferenceLogits) {
    c10::InferenceMode guard;
    const auto model = tiny_model();
    InfinitySampler sampler(model, quant());
    const auto base = sampler.sample(text(), schedule(), options());
    struct Case {
        const char* name;
        int64_t first, p;
        bool pruned;
        std::vector<int64_t> insertion;
        bool sdpa = false;  // else eager attention, as the reference's
    };
    for (const auto& k : std::vector<Case>{{"last three", 4, 3, false, {0}},
                                           {"last three, pruned", 4, 3, true, {0}},
                                           {"last three, pruned, SDPA", 4, 3, true, {0}, true},
                                           {"middle pair, layer cfg", 2, 2, false, {-2}},
                                           {"middle three, pruned", 3, 3, true, {-1, 0}}}) {
        SCOPED_TRACE(k.name);
        auto o = options();
        o.cfg_insertion_layer = k.insertion;
        o.attention = k.sdpa ? AttentionBackend::Sdpa : AttentionBackend::Eager;
        const auto dense = sampler.sample(text(), schedule(), o);
        GroupHooks hooks;
        hooks.first = k.first, hooks.p = k.p;
        if (k.pruned)  // every other token of the group's second scale, a third of its third
            for (int64_t j = 1; j < k.p; ++j) {
                const int64_t n = schedule().tokens(k.first + j);
                hooks.rows[k.first + j] = at::arange(0, n, j + 1, at::kLong);
            }
        const auto r = sampler.sample(text(), schedule(), o, &hooks);
        ASSERT_EQ(r.bits.size(), dense.bits.size());
        // The segments: the group's scales in order, packed one after the other.
        ASSERT_EQ(static_cast<int64_t>(hooks.segments.size()), k.p);
        int64_t offset = 0;
        for (int64_t j = 0; j < k.p; ++j) {
            const auto& seg = hooks.segments[j];
            EXPECT_EQ(seg.scale, k.first + j);
            EXPECT_EQ(seg.offset, offset);
            offset += seg.length();
        }
        ASSERT_EQ(hooks.group_logits.size(1), offset);
        // Scales before the group are the baseline's; the group's differ (other inputs).
        for (int64_t si = 0; si < k.first; ++si)
            EXPECT_TRUE(at::equal(r.bits[si], dense.bits[si])) << "scale " << si;
        bool differs = false;
        for (int64_t si = k.first + 1; si < k.first + k.p; ++si)
            differs = differs || !at::equal(r.bits[si], dense.bits[si]);
        EXPECT_TRUE(differs) << "the group's inputs changed nothing";
        // Pruned tokens: -1 ids, zero bits.
        for (const auto& [si, rows] : hooks.rows) {
            const auto ids = r.tokens[si];
            EXPECT_EQ(ids.ge(0).sum().item<int64_t>(), ids.size(0) * rows.numel()) << si;
        }
        const auto ref = reference_group_logits(model, text(), o, r.bits, hooks);
        ASSERT_EQ(ref.sizes(), hooks.group_logits.sizes());
        const double err = rel_error(hooks.group_logits, ref);
        // The comparison sees the block-causal mask inside the group.
        const auto unmasked = reference_group_logits(model, text(), o, r.bits, hooks, false);
        const double err_unmasked = rel_error(hooks.group_logits, unmasked);
        std::printf(
            "[infinity group] %s: logits rel. error %.3g vs the reference (%.3g without its mask "
            "inside the group)\n",
            k.name, err, err_unmasked);
        // fp32 rounding only (eager: 1.5e-7 to 5.7e-6 seen; SDPA sums in another order than the
        // reference's eager attention, and guidance 4 cond - 3 uncond magnifies it: 2.7e-5), the
        // issue's teacher-forcing bound; a missing mask inside the group is 1e-2.
        EXPECT_LE(err, 1e-4);
        EXPECT_GT(err_unmasked, 1e-3);
    }
}
