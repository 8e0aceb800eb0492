// The analysis on a small random VAR: each method's "off" setting keeps everything (recall 1,
// output error 0), the adapters read what each method's records say it kept, the capture does
// not change the run, and the JSON/CSV are complete. Adapters on constructed records.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <sstream>

#include "core/accel/probe_kinds.h"
#include "core/analysis/attention_analysis.h"
#include "core/analysis/method_masks.h"
#include "tests/tiny_models.h"

using namespace varscope;
using namespace varscope::analysis;

namespace {

// small_pipeline: scales 1, 2, 3, 4, 6, 8 (130 tokens), 4 layers, 2 heads.
std::unique_ptr<Runner> small_runner() {
    return var_runner(varscope::testing::small_pipeline(3));
}

SampleSettings settings() {
    SampleSettings s;
    s.class_ids = {2};
    s.seed = 5;
    s.cfg = 2.0;
    s.top_k = 0;
    s.top_p = 0.0;
    s.time_steps = false;
    return s;
}

nlohmann::json sparvar_small(double top_k, std::vector<int64_t> windows, int64_t middle) {
    return {{"sparvar",
             {{"sparse_scales", 2},
              {"sink_scales", 2},
              {"windows", windows},
              {"middle_window", middle},
              {"block", 4},
              {"query_block", 4},
              {"top_k", top_k}}}};
}

const ScheduleLayout kLayout{{1, 2, 3, 4, 6, 8}, 4, 2};

}  // namespace

TEST(AttentionAnalysis, EachMethodOffKeepsEverything) {
    const auto runner = small_runner();
    const std::vector<nlohmann::json> offs = {
        {{"skip", {{"last_n", 0}}}},
        {{"fastvar", {{"ratios", {0.0, 0.0}}}}},
        {{"lazyvar", {{"start_scale", 3}, {"group_size", 1}, {"ratios", {1.0}}}}},
        {{"ams_kv", {{"c_min", 130}, {"c_max", 130}}}},
        sparvar_small(1.0, {15}, 15),
    };
    for (const auto& off : offs) {
        const auto plan = runner->parse_accel(off);
        ASSERT_TRUE(plan->enabled()) << off.dump();
        AnalysisOptions opt;
        opt.time_dense = false;
        const auto a = analyze_attention(*runner, settings(), *plan, opt);
        EXPECT_EQ(a.masked_blocks, 0) << off.dump();
        ASSERT_EQ(a.records.size(), 6u * 4u * 2u) << off.dump();
        for (const auto& r : a.records) {
            EXPECT_EQ(r.recall, 1.0) << off.dump() << " scale " << r.scale << " layer " << r.layer;
            EXPECT_EQ(r.output_error, 0.0) << off.dump();
            EXPECT_EQ(r.query_kept, 1.0);
        }
    }
}

TEST(AttentionAnalysis, MethodsOnDropWhatTheirRecordsSay) {
    const auto runner = small_runner();
    AnalysisOptions opt;
    opt.time_dense = false;
    // FastVAR prunes half of the last two scales: recall <= the kept share there, 1 before.
    const auto fast = analyze_attention(
        *runner, settings(), *runner->parse_accel({{"fastvar", {{"ratios", {0.5, 0.5}}}}}), opt);
    for (const auto& r : fast.records) {
        if (r.scale < 4) {
            EXPECT_EQ(r.recall, 1.0);
        } else {
            EXPECT_LT(r.query_kept, 1.0) << r.scale;
            EXPECT_LE(r.recall, r.query_kept + 1e-9);
            EXPECT_GT(r.output_error, 0.0);
        }
    }
    // SparVAR: the decision scale (3) is dense; sparse scales attend fewer pairs.
    const auto sparse = analyze_attention(*runner, settings(),
                                          *runner->parse_accel(sparvar_small(0.2, {1, 3}, 1)), opt);
    double density = 0;
    for (const auto& r : sparse.records) {
        if (r.scale <= 3) {
            EXPECT_EQ(r.recall, 1.0) << r.scale;
        }
        if (r.scale >= 4) density += r.pair_density;
    }
    EXPECT_LT(density / (2 * 4 * 2), 1.0);
    const auto* rec = sparse.find(5, 3, 1);
    ASSERT_NE(rec, nullptr);
    EXPECT_EQ(rec->scale, 5);
    EXPECT_EQ(rec->layer, 3);
    EXPECT_EQ(rec->head, 1);
    EXPECT_LT(rec->recall, 1.0);
    EXPECT_EQ(sparse.find(6, 0, 0), nullptr);
}

TEST(AttentionAnalysis, AmsKvMasksHoldTheRecordedOccupancy) {
    const auto runner = small_runner();
    ProbeRecorder rec;
    const auto plan = runner->parse_accel({{"ams_kv", {{"c_min", 20}, {"c_max", 40}}}});
    runner->generate(settings(), plan.get(), &rec);
    const auto masks =
        masks_of_run(AccelConfig::from_json(plan->to_json()), rec.accel(), rec.scales(), kLayout);
    int64_t evicting = 0;
    for (const auto& r : rec.accel(probe_kinds::kKvOccupancy)) {
        for (int64_t l = 0; l < 4; ++l) {
            const auto held = r.data[l].sum().item<int64_t>();
            const auto& m = masks.at(r.scale, l);
            if (held == kLayout.tokens_through(r.scale)) {
                EXPECT_FALSE(m.keys.defined());
            } else {
                ASSERT_TRUE(m.keys.defined());
                EXPECT_EQ(m.keys.sum().item<int64_t>(), held);
                ++evicting;
            }
        }
    }
    EXPECT_GT(evicting, 0);  // the budgets evict at the last scales
}

TEST(AttentionAnalysis, CaptureLeavesTheRunUnchanged) {
    const auto runner = small_runner();
    const auto base = runner->generate(settings());
    AttentionCapture capture(kLayout, {}, {});
    const auto measured = runner->generate(settings(), nullptr, &capture);
    ASSERT_EQ(base.step_tokens.size(), measured.step_tokens.size());
    for (size_t s = 0; s < base.step_tokens.size(); ++s)
        EXPECT_TRUE(base.step_tokens[s].equal(measured.step_tokens[s])) << s;
    EXPECT_EQ(capture.records().size(), 6u * 4u * 2u);
}

TEST(AttentionAnalysis, HeadSamplingScalesLayersAndMaps) {
    EXPECT_EQ(sampled_heads(16, 4), (std::vector<int64_t>{0, 4, 8, 12}));
    EXPECT_EQ(sampled_heads(2, 0), (std::vector<int64_t>{0, 1}));
    const auto runner = small_runner();
    AnalysisOptions opt;
    opt.max_heads = 1;
    opt.scales = {5};
    opt.layers = {0, 2};
    opt.measure.query_maps = true;
    opt.dense_runs = 3;
    const auto a =
        analyze_attention(*runner, settings(), *runner->parse_accel(nlohmann::json::object()), opt);
    EXPECT_EQ(a.dense_runs, 3);
    EXPECT_LE(a.dense_ms, a.dense_first_ms);  // the fastest of the three
    EXPECT_EQ(a.dense_peak_bytes, 0);         // CPU: no CUDA peak to report
    ASSERT_EQ(a.records.size(), 2u);
    ASSERT_EQ(a.maps.size(), 2u);
    EXPECT_EQ(a.maps[0].entropy.sizes(), (at::IntArrayRef{1, 64}));
    EXPECT_GT(a.dense_ms, 0.0);
    EXPECT_GT(a.capture_ms, 0.0);
    opt.layers = {4};
    EXPECT_THROW(
        analyze_attention(*runner, settings(), *runner->parse_accel(nlohmann::json::object()), opt),
        std::invalid_argument);
}

TEST(AttentionAnalysis, JsonAndCsvHoldEveryRecord) {
    const auto runner = small_runner();
    AnalysisOptions opt;
    opt.time_dense = false;
    const auto a = analyze_attention(
        *runner, settings(), *runner->parse_accel({{"fastvar", {{"ratios", {0.5, 0.5}}}}}), opt);
    const auto j = nlohmann::json::parse(to_json(a).dump());
    EXPECT_EQ(j["method"], "FastVAR");
    ASSERT_EQ(j["records"].size(), a.records.size());
    EXPECT_EQ(j["records"][0]["mass_by_scale"].size(), 1u);
    EXPECT_EQ(j["head_types"].size(), 8u);
    EXPECT_EQ(j["layer_types"].size(), 4u);
    EXPECT_TRUE(j["timing"].contains("capture_ms"));
    EXPECT_EQ(j["typing_rule"]["min_queries"], TypingRule{}.min_queries);
    EXPECT_EQ(j["sink_scales"], opt.measure.sink_scales);
    std::istringstream csv(to_csv(a));
    std::string line;
    std::getline(csv, line);
    EXPECT_EQ(line.rfind("scale,layer,head,", 0), 0u);
    const auto columns = std::count(line.begin(), line.end(), ',');
    EXPECT_EQ(columns, 15 + 6);
    size_t rows = 0;
    while (std::getline(csv, line)) {
        EXPECT_EQ(std::count(line.begin(), line.end(), ','), columns) << line;
        ++rows;
    }
    EXPECT_EQ(rows, a.records.size());
}

TEST(MethodMasks, FastVarRecordsPruneQueriesAndLaterKeys) {
    MaskSet set;
    auto kept = at::zeros({6, 6}, at::kByte);
    kept[0].fill_(1);  // the first row of the 6x6 scale computed, at layer 1
    std::vector<AccelRecord> recs = {{"fastvar", probe_kinds::kPtsKept, 4, 1, kept, {}}};
    add_fastvar_masks(set, recs, kLayout);
    const auto& m4 = set.at(4, 1);
    ASSERT_TRUE(m4.queries.defined());
    EXPECT_EQ(m4.queries.sum().item<int64_t>(), 6);
    EXPECT_EQ(m4.keys.numel(), 66);
    EXPECT_EQ(m4.keys.sum().item<int64_t>(), 30 + 6);
    const auto& m5 = set.at(5, 1);  // the next scale: all its queries, the pruned keys missing
    EXPECT_FALSE(m5.queries.defined());
    EXPECT_EQ(m5.keys.sum().item<int64_t>(), 30 + 6 + 64);
    EXPECT_TRUE(set.at(4, 0).keeps_all());
    recs[0].data = at::ones({5, 5}, at::kByte);
    MaskSet bad;
    EXPECT_THROW(add_fastvar_masks(bad, recs, kLayout), std::invalid_argument);
}

TEST(MethodMasks, Cs4aListsBecomePerHeadPairs) {
    SparVarConfig cfg;
    cfg.query_block = 32;
    cfg.cs4a_fraction = 0.5;
    // Scale 5 (64 queries, 130 keys): two query blocks; head 1 keeps keys {0, 129}, -1 padded.
    auto ids = at::full({2, 2, 3}, -1, at::kLong);
    ids[1][0][0] = 0;
    ids[1][0][1] = 129;
    ids[0][1][0] = 7;
    MaskSet set;
    add_sparvar_masks(set, {{"sparvar", probe_kinds::kCs4aMapped, 5, 0, ids, {}}}, cfg, kLayout);
    const auto& m = set.at(5, 0);
    ASSERT_TRUE(m.pairs.defined());
    EXPECT_EQ(m.pairs.sizes(), (at::IntArrayRef{2, 2, 130}));
    EXPECT_EQ(m.block_q, 32);
    EXPECT_EQ(m.pairs.sum().item<int64_t>(), 3);
    EXPECT_TRUE(m.pairs[1][0][129].item<bool>());
    EXPECT_TRUE(m.pairs[0][1][7].item<bool>());
    // CSLA's block mask (block 4) covers the CSLA layers 2 and 3 only.
    cfg.block = 4;
    auto blocks = at::ones({16, 33}, at::kBool);
    blocks[0][0] = false;
    add_sparvar_masks(set, {{"sparvar", probe_kinds::kCslaBlockMask, 5, -1, blocks, {}}}, cfg,
                      kLayout);
    EXPECT_TRUE(set.at(5, 1).keeps_all());
    EXPECT_EQ(set.at(5, 2).block_q, 4);
    EXPECT_FALSE(set.at(5, 3).pairs[0][0][0].item<bool>());
}

TEST(MethodMasks, SkippedScalesComputeNothing) {
    MaskSet set;
    ScaleRecord skipped;
    skipped.scale = 5;
    skipped.skipped = true;
    add_skip_masks(set, {ScaleRecord{}, skipped}, kLayout);
    EXPECT_EQ(set.at(5, 3).queries.sum().item<int64_t>(), 0);
    EXPECT_TRUE(set.at(0, 0).keeps_all());
}

// The dense form of a kept set (the app's overlay) entry by entry: queries x keys x blocks.
TEST(MethodMasks, DenseKeepExpandsEachPart) {
    KeepMask m;
    m.queries = at::tensor({1, 0, 1, 1, 1}).gt(0);
    m.keys = at::tensor({1, 1, 1, 0, 1, 1, 1}).gt(0);
    m.pairs = at::rand({2, 3, 3}) > 0.4;  // blocks of 2 queries x 3 keys, per head
    m.block_q = 2;
    m.block_k = 3;
    const auto d = dense_keep(m, 2, 5, 7);
    ASSERT_EQ(d.sizes(), (at::IntArrayRef{2, 5, 7}));
    for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < 5; ++i)
            for (int64_t j = 0; j < 7; ++j) {
                const bool want = m.queries[i].item<bool>() && m.keys[j].item<bool>() &&
                                  m.pairs[h][i / 2][j / 3].item<bool>();
                EXPECT_EQ(d[h][i][j].item<bool>(), want) << h << "," << i << "," << j;
            }
    EXPECT_EQ(dense_keep(KeepMask{}, 4, 3, 6).sizes(), (at::IntArrayRef{1, 3, 6}));
    EXPECT_TRUE(dense_keep(KeepMask{}, 4, 3, 6).all().item<bool>());
    EXPECT_THROW(dense_keep(m, 2, 5, 8), std::invalid_argument);  // keys of another length
    EXPECT_THROW(dense_keep(m, 3, 5, 7), std::invalid_argument);  // 2 heads' blocks, 3 heads
}
