// Grids of one measure (the app's grid view, the CLI's figure) against the records they come
// from: means over heads, unmeasured cells, the head-type rule, names, CSV, and map_recall
// against a direct sum.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <stdexcept>

#include "core/analysis/measure_grid.h"

using namespace varscope::analysis;

namespace {

// Scales 0..2 (1, 4, 16 queries), layers 0..1, heads 0..2; values from a seeded generator.
std::vector<HeadMeasures> records(bool skip_layer1_scale2 = false) {
    std::mt19937 gen(5);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<HeadMeasures> out;
    const int64_t queries[] = {1, 4, 16};
    for (int64_t s = 0; s < 3; ++s)
        for (int64_t l = 0; l < 2; ++l)
            for (int64_t h = 0; h < 3; ++h) {
                if (skip_layer1_scale2 && s == 2 && l == 1) continue;
                HeadMeasures r;
                r.scale = s;
                r.layer = l;
                r.head = h;
                r.queries = queries[s];
                r.recall = u(gen);
                r.output_error = u(gen);
                r.entropy = u(gen) * 3;
                r.verticality = u(gen);
                r.mass_local = u(gen);
                out.push_back(r);
            }
    return out;
}

}  // namespace

TEST(MeasureGrid, ScaleLayerCellsAreHeadMeans) {
    const auto rs = records(true);
    const auto g = scale_layer_grid(rs, GridMeasure::Recall, 4, 2);
    ASSERT_EQ(g.rows, 4);
    ASSERT_EQ(g.cols, 2);
    for (int64_t s = 0; s < 3; ++s)
        for (int64_t l = 0; l < 2; ++l) {
            double sum = 0;
            int n = 0;
            for (const auto& r : rs)
                if (r.scale == s && r.layer == l) {
                    sum += r.recall;
                    ++n;
                }
            if (n == 0) {
                EXPECT_TRUE(std::isnan(g.at(s, l)));
                EXPECT_EQ(g.heads[size_t(s * 2 + l)], 0);
            } else {
                EXPECT_DOUBLE_EQ(g.at(s, l), sum / n);
                EXPECT_EQ(g.heads[size_t(s * 2 + l)], n);
            }
        }
    EXPECT_TRUE(std::isnan(g.at(3, 0)));  // a scale nothing measured
    int64_t s = 0, l = 0, h = 0;
    g.locate(2, 1, s, l, h);
    EXPECT_EQ(s, 2);
    EXPECT_EQ(l, 1);
    EXPECT_EQ(h, -1);
}

TEST(MeasureGrid, LayerHeadCellsAreTheRecords) {
    const auto rs = records();
    const auto g = layer_head_grid(rs, GridMeasure::OutputError, 1, 2, 4);
    ASSERT_EQ(g.rows, 2);
    ASSERT_EQ(g.cols, 4);
    for (const auto& r : rs) {
        if (r.scale == 1) {
            EXPECT_DOUBLE_EQ(g.at(r.layer, r.head), r.output_error);
        }
    }
    EXPECT_TRUE(std::isnan(g.at(0, 3)));  // head 3 was not measured
    int64_t s = 0, l = 0, h = 0;
    g.locate(1, 2, s, l, h);
    EXPECT_EQ(s, 1);
    EXPECT_EQ(l, 1);
    EXPECT_EQ(h, 2);
    const auto [lo, hi] = g.range();
    EXPECT_LE(lo, hi);
    EXPECT_TRUE(std::isfinite(lo) && std::isfinite(hi));
}

TEST(MeasureGrid, HeadTypeFollowsTheRule) {
    auto rs = records();
    TypingRule rule;
    rule.verticality_threshold = 0.5;
    const auto per_scale = scale_layer_grid(rs, GridMeasure::HeadType, 3, 2, rule);
    EXPECT_TRUE(std::isnan(per_scale.at(0, 0)));  // 1 query < min_queries
    for (int64_t s = 1; s < 3; ++s)
        for (int64_t l = 0; l < 2; ++l) {
            int contextual = 0;
            for (const auto& r : rs)
                if (r.scale == s && r.layer == l && r.verticality >= 0.5) ++contextual;
            EXPECT_DOUBLE_EQ(per_scale.at(s, l), contextual / 3.0);
        }
    const auto types = type_heads(rs, rule);
    const auto per_head = layer_head_grid(rs, GridMeasure::HeadType, 0, 2, 3, rule);
    ASSERT_EQ(types.size(), 6u);
    for (const auto& t : types)
        EXPECT_EQ(per_head.at(t.layer, t.head), t.type == "contextual" ? 1.0 : 0.0);
}

TEST(MeasureGrid, NamesRoundTripAndUnknownNamesAreNamed) {
    for (const auto& n : grid_measure_names())
        EXPECT_EQ(grid_measure_name(grid_measure_from_name(n)), n);
    try {
        grid_measure_from_name("nope");
        FAIL() << "no exception";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("recall"), std::string::npos);
    }
}

TEST(MeasureGrid, CsvHoldsTheMeasuredCells) {
    const auto g = scale_layer_grid(records(true), GridMeasure::Entropy, 3, 2);
    std::istringstream csv(grid_csv(g, GridMeasure::Entropy));
    std::string line;
    std::getline(csv, line);
    EXPECT_EQ(line, "scale,layer,head,entropy");
    int rows = 0;
    while (std::getline(csv, line)) {
        std::istringstream f(line);
        std::string s, l, h, v;
        std::getline(f, s, ',');
        std::getline(f, l, ',');
        std::getline(f, h, ',');
        std::getline(f, v, ',');
        EXPECT_TRUE(h.empty());
        EXPECT_NEAR(std::stod(v), g.at(std::stoll(s), std::stoll(l)), 1e-7);
        ++rows;
    }
    EXPECT_EQ(rows, 5);  // 3 x 2 cells, (2, 1) not measured
}

TEST(MeasureGrid, MapRecallIsTheMeanKeptMass) {
    std::mt19937 gen(3);
    std::uniform_real_distribution<float> u(0.f, 1.f);
    const int64_t q = 5, k = 7;
    std::vector<float> p(q * k);
    std::vector<uint8_t> kept(q * k);
    double want = 0;
    for (int64_t i = 0; i < q; ++i) {
        double row = 0, kept_row = 0;
        for (int64_t j = 0; j < k; ++j) row += p[size_t(i * k + j)] = u(gen);
        for (int64_t j = 0; j < k; ++j) {
            p[size_t(i * k + j)] = float(p[size_t(i * k + j)] / row);
            kept[size_t(i * k + j)] = u(gen) > 0.5f;
            if (kept[size_t(i * k + j)]) kept_row += p[size_t(i * k + j)];
        }
        want += kept_row / q;
    }
    EXPECT_NEAR(map_recall(p, kept, q, k), want, 1e-6);
    EXPECT_NEAR(map_recall(p, std::vector<uint8_t>(q * k, 1), q, k), 1.0, 1e-6);
    EXPECT_EQ(map_recall(p, std::vector<uint8_t>(q * k, 0), q, k), 0.0);
    EXPECT_THROW(map_recall(p, kept, q, k + 1), std::invalid_argument);
}
