// `train infinity` on tiny data: the loss pieces against their definitions, cond drop, the
// trainable T5 (gradients, its Hugging Face folder), and a whole run that learns, resumes like an
// unbroken run and exports files the Infinity runner opens and generates from.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "core/models/t5_text_encoder.h"
#include "core/pipeline.h"  // load_options
#include "core/runner/runner.h"
#include "core/text/sentencepiece_tokenizer.h"
#include "core/training/infinity_trainer.h"
#include "tests/test_util.h"

using namespace varscope;

namespace {

std::string fixture(const std::string& name) {
    return varscope::testing::source_dir() + "/tests/fixtures/" + name;
}

T5EncoderConfig tiny_t5(int64_t vocab) {
    T5EncoderConfig c;
    c.vocab_size = vocab;
    c.d_model = 32;
    c.d_kv = 8;
    c.d_ff = 64;
    c.num_layers = 2;
    c.num_heads = 4;
    c.relative_attention_num_buckets = 8;
    c.relative_attention_max_distance = 20;
    return c;
}

InfinityConfig tiny_infinity() {
    InfinityConfig c;
    c.depth = 2;
    c.embed_dim = 64;
    c.num_heads = 2;
    c.mlp_hidden = 128;
    c.text_channels = 32;
    c.text_maxlen = 32;
    c.pool_heads = 2;
    c.codebook_dim = 6;  // tests/fixtures/bsq_tiny
    c.num_levels = 7;
    return c;
}

// Eight 64x64 images: a coloured square on white, two captions each.
struct TinyData {
    std::string pack;
    std::vector<std::vector<std::string>> captions;
};
TinyData tiny_data(const varscope::testing::TempDir& dir) {
    const std::vector<std::array<int, 3>> colours = {
        {220, 30, 30}, {30, 200, 40}, {30, 60, 220}, {240, 200, 20}};
    const std::vector<std::string> names = {"red", "green", "blue", "yellow"};
    auto img = at::full({8, 3, 64, 64}, 255, at::kByte);
    TinyData d;
    for (int64_t i = 0; i < 8; ++i) {
        const auto& c = colours[size_t(i % 4)];
        const int64_t lo = i < 4 ? 16 : 8, hi = i < 4 ? 48 : 56;
        for (int64_t ch = 0; ch < 3; ++ch)
            img[i][ch].narrow(0, lo, hi - lo).narrow(1, lo, hi - lo).fill_(c[size_t(ch)]);
        const std::string size = i < 4 ? "small" : "big";
        d.captions.push_back({size + " " + names[size_t(i % 4)] + " square",
                              "a " + names[size_t(i % 4)] + " block"});
    }
    d.pack = dir.file("pack.safetensors");
    save_safetensors({{"images", img}, {"labels", at::arange(8, at::kLong)}}, d.pack);
    return d;
}

InfinityTrainJob tiny_job(const TinyData& data, const std::string& run_dir, int64_t steps) {
    const SentencePieceTokenizer tok(fixture("t5_tiny/spiece.model"));
    InfinityTrainJob job;
    job.model = tiny_infinity();
    job.t5 = tiny_t5(tok.piece_size() + tok.options().extra_ids);
    job.train.steps = steps;
    job.train.batch = 8;
    job.train.lr = 1e-2;
    job.train.warmup = 8;  // lr_at(step) then does not depend on `steps` (resume check)
    job.train.log_every = 1;
    job.train.checkpoint_every = 100;
    job.train.device = "cpu";
    job.data_path = data.pack;
    job.captions = data.captions;
    job.vae_path = fixture("bsq_tiny/vae.pth");
    job.tokenizer_path = fixture("t5_tiny/spiece.model");
    job.run_dir = run_dir;
    job.cond_drop = 0.25;
    return job;
}

// train_infinity refuses `job` with an std::invalid_argument naming `words`.
void expect_job_error(const InfinityTrainJob& job, const std::string& words) {
    std::ostringstream sink;
    try {
        train_infinity(job, sink);
        ADD_FAILURE() << "accepted; expected: " << words;
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
}

std::vector<nlohmann::json> step_records(const std::string& log) {
    std::ifstream f(log);
    std::vector<nlohmann::json> out;
    for (std::string line; std::getline(f, line);) {
        auto j = nlohmann::json::parse(line);
        if (j.contains("step")) out.push_back(j);
    }
    return out;
}

}  // namespace

TEST(InfinityTraining, BitwiseLossIsThePerBitCrossEntropy) {
    const InfinitySchedule s = infinity_schedule(1.0, "0.06M").first(3);  // 1 + 4 + 16 tokens
    const int64_t B = 2, L = s.total_tokens(), d = 3;
    auto gen = at::detail::createCPUGenerator(1);
    const auto logits = at::randn({B, L, 2 * d}, gen);
    const auto bits = at::randint(0, 2, {B, L, d}, gen, at::kLong);
    // The official form: cross_entropy over (B, 2, L, d), mean over bits, 1/L per token.
    const auto ce = at::cross_entropy_loss(logits.view({B, L, d, 2}).permute({0, 3, 1, 2}), bits,
                                           {}, at::Reduction::None);  // (B, L, d)
    EXPECT_NEAR(bitwise_loss(logits, bits, s, false).item<double>(), ce.mean().item<double>(),
                1e-6);
    // Reweighted: sqrt(16 / tokens) per token, normalised to sum 1 over the sequence.
    std::vector<double> w;
    for (int64_t si = 0; si < 3; ++si)
        for (int64_t t = 0; t < s.tokens(si); ++t) w.push_back(4.0 / std::sqrt(s.tokens(si)));
    auto lw = at::tensor(w, at::kDouble).to(at::kFloat);
    lw = lw / lw.sum();
    EXPECT_NEAR(bitwise_loss(logits, bits, s, true).item<double>(),
                (ce.mean(-1) * lw).sum(-1).mean().item<double>(), 1e-6);
    // A perfect prediction is 100 % per scale; the shapes are checked.
    const auto sure = at::stack({(1 - bits) * 9.0, bits * 9.0}, -1).view({B, L, 2 * d});
    const BitAccuracy a = bit_accuracy(sure.to(at::kFloat), bits, s);
    ASSERT_EQ(a.per_scale.size(), 3u);
    for (double v : a.per_scale) EXPECT_DOUBLE_EQ(v, 1.0);
    EXPECT_DOUBLE_EQ(a.token, 1.0);
    EXPECT_LT(bit_accuracy(-sure.to(at::kFloat), bits, s).mean, 1e-9);
    EXPECT_THROW(bitwise_loss(logits, bits.narrow(1, 0, L - 1), s, false), std::invalid_argument);
}

TEST(InfinityTraining, CondDropReplacesThePromptWithCfgUncond) {
    InfinityText text;
    text.lens = {3, 2, 4};
    text.kv_compact = at::randn({9, 5});
    const auto uncond = at::randn({6, 5});
    const InfinityText out = drop_conditions(text, uncond, {false, true, false});
    EXPECT_EQ(out.lens, text.lens);
    EXPECT_TRUE(at::equal(out.kv_compact.narrow(0, 0, 3), text.kv_compact.narrow(0, 0, 3)));
    EXPECT_TRUE(at::equal(out.kv_compact.narrow(0, 3, 2), uncond.narrow(0, 0, 2)));
    EXPECT_TRUE(at::equal(out.kv_compact.narrow(0, 5, 4), text.kv_compact.narrow(0, 5, 4)));
    EXPECT_THROW(drop_conditions(text, uncond.narrow(0, 0, 3), {false, false, true}),
                 std::invalid_argument);
    EXPECT_THROW(drop_conditions(text, uncond, {true}), std::invalid_argument);
}

TEST(InfinityTraining, CaptionsAreDrawnFromTheirRow) {
    const std::vector<std::vector<std::string>> caps = {{"a", "b"}, {"c"}, {"d", "e", "f"}};
    auto gen = at::detail::createCPUGenerator(5);
    std::set<std::string> seen;
    for (int i = 0; i < 50; ++i) {
        const auto p = pick_captions(caps, at::tensor({2, 0, 1}, at::kLong), gen);
        ASSERT_EQ(p.size(), 3u);
        EXPECT_TRUE(p[0] == "d" || p[0] == "e" || p[0] == "f");
        EXPECT_TRUE(p[1] == "a" || p[1] == "b");
        EXPECT_EQ(p[2], "c");
        seen.insert(p.begin(), p.end());
    }
    EXPECT_EQ(seen.size(), 6u);  // every caption comes up
    EXPECT_THROW(pick_captions(caps, at::tensor({3}, at::kLong), gen), std::invalid_argument);
}

TEST(InfinityTraining, CaptionNoiseAddsFillersAndDropsWordsButKeepsOne) {
    const std::vector<std::string> words = {"red", "heart,", "twemoji", "style"};
    const std::string caption = "red heart, twemoji style";
    CaptionNoise only_fillers;
    only_fillers.prob = 1;
    only_fillers.max_words = 3;
    auto gen = at::detail::createCPUGenerator(11);
    std::set<size_t> added;
    for (int i = 0; i < 40; ++i) {
        const std::string out = noisy_caption(caption, only_fillers, gen);
        std::vector<std::string> got;
        std::istringstream in(out);
        for (std::string w; in >> w;) got.push_back(w);
        // Every word of the caption, in order, plus 1..3 fillers.
        ASSERT_GE(got.size(), words.size() + 1) << out;
        ASSERT_LE(got.size(), words.size() + 3) << out;
        added.insert(got.size() - words.size());
        size_t k = 0;
        for (const auto& w : got)
            if (k < words.size() && w == words[k]) ++k;
        EXPECT_EQ(k, words.size()) << out;
    }
    EXPECT_EQ(added.size(), 3u);  // 1, 2 and 3 fillers all come up
    // The fillers never use the held-out templates' words (the evaluation's unseen wording).
    for (const auto& f : kCaptionFillers)
        for (const char* held : {"picture", "drawn", "icon", "showing", "from", "category", "the"})
            EXPECT_NE(f, held);
    // Dropout keeps at least one word; same generator state, same output.
    CaptionNoise drop;
    drop.word_dropout = 0.999;
    EXPECT_FALSE(noisy_caption(caption, drop, gen).empty());
    auto g1 = at::detail::createCPUGenerator(3), g2 = at::detail::createCPUGenerator(3);
    CaptionNoise both = only_fillers;
    both.word_dropout = 0.3;
    EXPECT_EQ(noisy_caption(caption, both, g1), noisy_caption(caption, both, g2));
    // Off: pick_captions draws and returns exactly what it did without noise.
    const std::vector<std::vector<std::string>> caps = {{"a b", "c d"}, {"e f g"}};
    auto h1 = at::detail::createCPUGenerator(9), h2 = at::detail::createCPUGenerator(9);
    EXPECT_EQ(pick_captions(caps, at::tensor({1, 0}, at::kLong), h1),
              pick_captions(caps, at::tensor({1, 0}, at::kLong), h2, CaptionNoise{}));
    EXPECT_EQ(at::rand({1}, h1).item<double>(), at::rand({1}, h2).item<double>());
}

// Joined captions: two different phrasings of the row, joined by ", " (every ordered pair comes
// up); a row with one phrasing keeps it; the same generator state gives the same captions.
TEST(InfinityTraining, CaptionJoinAddsAnotherPhrasingOfTheSameRow) {
    const std::vector<std::vector<std::string>> caps = {{"a b", "c d", "e f"}, {"g"}};
    CaptionNoise join;
    join.join = 1;
    auto gen = at::detail::createCPUGenerator(4);
    std::set<std::string> pairs;
    for (int i = 0; i < 60; ++i) {
        const auto p = pick_captions(caps, at::tensor({0, 1}, at::kLong), gen, join);
        ASSERT_EQ(p.size(), 2u);
        EXPECT_EQ(p[1], "g");
        const auto comma = p[0].find(", ");
        ASSERT_NE(comma, std::string::npos) << p[0];
        const std::string x = p[0].substr(0, comma), y = p[0].substr(comma + 2);
        EXPECT_NE(x, y);
        for (const auto& part : {x, y})
            EXPECT_NE(std::find(caps[0].begin(), caps[0].end(), part), caps[0].end()) << p[0];
        pairs.insert(p[0]);
    }
    EXPECT_EQ(pairs.size(), 6u);  // 3 x 2 ordered pairs
    auto g1 = at::detail::createCPUGenerator(7), g2 = at::detail::createCPUGenerator(7);
    join.join = 0.5;
    EXPECT_EQ(pick_captions(caps, at::tensor({0, 0, 0, 0}, at::kLong), g1, join),
              pick_captions(caps, at::tensor({0, 0, 0, 0}, at::kLong), g2, join));
}

// Pseudo-word fillers look like the held-out wordings' unknown words: random lower-case strings
// of 3..9 letters, never a held-out template word, deterministic per generator state; with the
// share at 0 only the word list is used.
TEST(InfinityTraining, CaptionNoisePseudoWordsAreRandomLetterStrings) {
    const std::string caption = "red heart, twemoji style";
    CaptionNoise pseudo;
    pseudo.prob = 1;
    pseudo.max_words = 3;
    pseudo.pseudo_words = 1;
    auto gen = at::detail::createCPUGenerator(5);
    std::set<std::string> seen;
    for (int i = 0; i < 40; ++i) {
        std::istringstream in(noisy_caption(caption, pseudo, gen));
        for (std::string w; in >> w;) {
            if (w == "red" || w == "heart," || w == "twemoji" || w == "style") continue;
            seen.insert(w);
            EXPECT_GE(w.size(), 3u) << w;
            EXPECT_LE(w.size(), 10u) << w;
            for (char ch : w) EXPECT_TRUE(ch >= 'a' && ch <= 'z') << w;
            EXPECT_EQ(std::find(kCaptionFillers.begin(), kCaptionFillers.end(), w),
                      kCaptionFillers.end())
                << w;
            EXPECT_EQ(std::find(kHeldOutWords.begin(), kHeldOutWords.end(), w), kHeldOutWords.end())
                << w;
        }
    }
    EXPECT_GT(seen.size(), 30u);  // 40 captions x 1..3 random strings: nearly all distinct
    auto g1 = at::detail::createCPUGenerator(8), g2 = at::detail::createCPUGenerator(8);
    EXPECT_EQ(noisy_caption(caption, pseudo, g1), noisy_caption(caption, pseudo, g2));
    CaptionNoise words = pseudo;  // share 0: only the word list
    words.pseudo_words = 0;
    for (int i = 0; i < 20; ++i) {
        std::istringstream in(noisy_caption(caption, words, gen));
        for (std::string w; in >> w;) {
            if (w == "red" || w == "heart," || w == "twemoji" || w == "style") continue;
            EXPECT_NE(std::find(kCaptionFillers.begin(), kCaptionFillers.end(), w),
                      kCaptionFillers.end())
                << w;
        }
    }
}

TEST(InfinityTraining, T5TrainsAndSavesAHuggingFaceFolder) {
    if (!SentencePieceTokenizer::available()) GTEST_SKIP() << "built without SentencePiece";
    T5Encoder t5(tiny_t5(500));
    t5.init_weights(3);
    t5.set_trainable(true);
    const auto ids = at::tensor({5, 17, 99, 1, 42, 7, 1, 0}, at::kLong).view({2, 4});
    const auto mask = at::tensor({1, 1, 1, 1, 1, 1, 1, 0}, at::kLong).view({2, 4});
    const auto h = t5.forward_train(ids, mask);
    ASSERT_TRUE(h.requires_grad());
    EXPECT_FALSE(t5.forward(ids, mask).requires_grad());
    EXPECT_TRUE(at::allclose(h.detach(), t5.forward(ids, mask)));
    h.pow(2).mean().backward();
    for (const auto& p : t5.module().named_parameters()) {
        if (p.key() == "embed_tokens.weight") continue;  // most rows unused
        ASSERT_TRUE(p.value().grad().defined()) << p.key();
        EXPECT_GT(p.value().grad().abs().max().item<double>(), 0.0) << p.key();
    }
    EXPECT_GT(
        t5.module().named_parameters()["embed_tokens.weight"].grad()[99].abs().sum().item<double>(),
        0.0);
    EXPECT_THROW(t5.forward_train(ids.add(500), mask), std::invalid_argument);

    // The folder reads back through the loader the runner uses (fp16 file, fp32 model).
    varscope::testing::TempDir dir;
    save_t5_encoder_folder(t5, dir.file("t5"), at::kHalf, fixture("t5_tiny/spiece.model"));
    T5TextEncoder text(dir.file("t5"));
    EXPECT_EQ(text.encoder().config().num_layers, 2);
    EXPECT_EQ(text.encoder().config().activation, "gelu_new");
    EXPECT_TRUE(text.encoder().config().gated);
    const auto back = text.encoder().forward(ids, mask);
    const double err = ((back - h.detach()).norm() / h.detach().norm()).item<double>();
    EXPECT_LT(err, 5e-3);  // fp16 weights
    EXPECT_GT(err, 0.0);
    EXPECT_EQ(load_t5_encoder_tensors(dir.file("t5")).count("embed_tokens.weight"), 1u);
}

TEST(InfinityTraining, RunLearnsResumesAndExportsWhatTheRunnerOpens) {
    if (!SentencePieceTokenizer::available()) GTEST_SKIP() << "built without SentencePiece";
    varscope::testing::TempDir dir;
    const TinyData data = tiny_data(dir);

    InfinityTrainJob job = tiny_job(data, dir.file("whole"), 6);
    std::ostringstream out;
    const auto report = train_infinity(job, out);
    EXPECT_EQ(report["steps"], 6);
    const auto recs = step_records(dir.file("whole/log.jsonl"));
    ASSERT_EQ(recs.size(), 6u);
    EXPECT_LT(recs.back()["loss"].get<double>(), recs.front()["loss"].get<double>()) << out.str();
    EXPECT_EQ(recs.front()["bit_acc_per_scale"].size(), 7u);
    int64_t dropped = 0;
    for (const auto& r : recs) dropped += r["dropped"].get<int64_t>();
    EXPECT_GT(dropped, 0);  // cond drop happened (25 % of 48 rows)
    EXPECT_LT(dropped, 48);
    // The exports give the trained model's teacher-forced numbers (fp16 rounding only).
    EXPECT_NEAR(report["eval_export"]["loss"].get<double>(),
                report["eval_model"]["loss"].get<double>(), 2e-2);

    // Three steps, then three more in the same folder == six steps at once.
    InfinityTrainJob split = tiny_job(data, dir.file("split"), 3);
    std::ostringstream sink;
    train_infinity(split, sink);
    split.train.steps = 6;
    std::ostringstream out2;
    train_infinity(split, out2);
    EXPECT_NE(out2.str().find("resumed at step 3"), std::string::npos) << out2.str();
    const auto a = load_checkpoint(dir.file("whole/final.safetensors"));
    const auto b = load_checkpoint(dir.file("split/final.safetensors"));
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, t] : a)
        EXPECT_LT((t - b.at(name)).abs().max().item<double>(), 1e-6) << name;
    const auto ta = load_t5_encoder_tensors(dir.file("whole/t5-final"));
    const auto tb = load_t5_encoder_tensors(dir.file("split/t5-final"));
    for (const auto& [name, t] : ta)
        EXPECT_LT((t - tb.at(name)).abs().max().item<double>(), 1e-6) << name;
    const auto split_recs = step_records(dir.file("split/log.jsonl"));
    ASSERT_EQ(split_recs.size(), 6u);
    EXPECT_DOUBLE_EQ(split_recs.back()["loss"].get<double>(), recs.back()["loss"].get<double>());
    // The T5 learnt too.
    const auto t5_init = [&] {
        T5Encoder t(job.t5);
        t.init_weights(job.train.seed + 1);
        return t.state_dict();
    }();
    EXPECT_GT((ta.at("block.0.layer.0.SelfAttention.q.weight") -
               t5_init.at("block.0.layer.0.SelfAttention.q.weight"))
                  .abs()
                  .max()
                  .item<double>(),
              1e-4);

    // The runner opens the export with the BSQ VAE and the T5 folder and draws an image.
    EXPECT_EQ(detect_runner_family(dir.file("whole/export-fp16.safetensors")), Family::Infinity);
    ModelSpec spec;
    spec.model_path = dir.file("whole/export-fp16.safetensors");
    spec.vae_path = job.vae_path;
    spec.text_encoder_path = dir.file("whole/t5-fp16");
    const auto runner = open_runner(spec, load_options("cpu", "fp32"));
    SampleSettings s = runner->defaults();
    s.prompts = {"small red square"};
    s.pixels = "0.06M";
    s.h_div_w = 1.0;
    s.seed = 1;
    const RunResult r = runner->generate(s);
    ASSERT_TRUE(r.images.defined());
    EXPECT_EQ(r.images.sizes(), at::IntArrayRef({1, 3, 64, 64}));
    EXPECT_TRUE(at::isfinite(r.images).all().item<bool>());
    EXPECT_EQ(r.step_tokens.size(), 7u);
}

// The text-identity loss (phase 8): the pooled caption feature is each row's mean over its
// tokens; a run with the head learns the rows' classes from their captions, logs it beside the
// unchanged bitwise loss, checkpoints the head (resume as an unbroken run) and exports no head.
TEST(InfinityTraining, TextIdentityLossTeachesTheCaptionsTheirClass) {
    const InfinityText packed{at::arange(10, at::kFloat).view({5, 2}), {2, 3}};
    const at::Tensor m = mean_text_features(packed);
    ASSERT_EQ(m.sizes(), at::IntArrayRef({2, 2}));
    EXPECT_TRUE(at::allclose(m, at::tensor({1.0f, 2.0f, 6.0f, 7.0f}).view({2, 2})));
    EXPECT_THROW(mean_text_features({packed.kv_compact, {2, 2}}), std::invalid_argument);
    EXPECT_THROW(mean_text_features({packed.kv_compact, {2, 4}}), std::invalid_argument);
    EXPECT_THROW(mean_text_features({packed.kv_compact, {0, 5}}), std::invalid_argument);

    if (!SentencePieceTokenizer::available()) GTEST_SKIP() << "built without SentencePiece";
    varscope::testing::TempDir dir;
    const TinyData data = tiny_data(dir);
    InfinityTrainJob job = tiny_job(data, dir.file("whole"), 8);
    job.text_identity = 1.0;
    std::ostringstream out;
    const auto report = train_infinity(job, out);
    EXPECT_DOUBLE_EQ(report["text_identity"].get<double>(), 1.0);
    const auto recs = step_records(dir.file("whole/log.jsonl"));
    ASSERT_EQ(recs.size(), 8u);
    ASSERT_TRUE(recs.front().contains("text_identity_loss")) << recs.front().dump();
    // Eight classes: the head starts near ln 8 and learns them from the captions.
    EXPECT_NEAR(recs.front()["text_identity_loss"].get<double>(), std::log(8.0), 1.0);
    EXPECT_LT(recs.back()["text_identity_loss"].get<double>(),
              recs.front()["text_identity_loss"].get<double>() - 0.3)
        << out.str();
    EXPECT_GE(recs.back()["text_identity_acc"].get<double>(), 0.0);
    EXPECT_LE(recs.back()["text_identity_acc"].get<double>(), 1.0);
    // "loss" is the bitwise loss alone: the first step's equals a run without the head (same
    // weights, captions and drops before any update).
    InfinityTrainJob plain = tiny_job(data, dir.file("plain"), 1);
    std::ostringstream sink;
    train_infinity(plain, sink);
    const auto plain_recs = step_records(dir.file("plain/log.jsonl"));
    ASSERT_EQ(plain_recs.size(), 1u);
    EXPECT_FALSE(plain_recs.front().contains("text_identity_loss"));
    EXPECT_NEAR(recs.front()["loss"].get<double>(), plain_recs.front()["loss"].get<double>(), 1e-6);
    // The head is in the checkpoint, not in what ships.
    EXPECT_EQ(
        load_checkpoint(dir.file("whole/last.safetensors")).count("text_identity_head.weight"), 1u);
    for (const auto& [name, t] : load_checkpoint(dir.file("whole/export-fp16.safetensors")))
        EXPECT_EQ(name.find("text_identity"), std::string::npos) << name;
    // Four steps, then four more in the same folder == eight at once (the head resumes too).
    InfinityTrainJob split = tiny_job(data, dir.file("split"), 4);
    split.text_identity = 1.0;
    train_infinity(split, sink);
    split.train.steps = 8;
    train_infinity(split, sink);
    const auto split_recs = step_records(dir.file("split/log.jsonl"));
    ASSERT_EQ(split_recs.size(), 8u);
    EXPECT_NEAR(split_recs.back()["text_identity_loss"].get<double>(),
                recs.back()["text_identity_loss"].get<double>(), 1e-6);
    EXPECT_NEAR(split_recs.back()["loss"].get<double>(), recs.back()["loss"].get<double>(), 1e-6);

    // Labels of one class cannot teach an identity: refused by name.
    const std::string one_class = dir.file("one_class.safetensors");
    save_safetensors({{"images", load_checkpoint(data.pack).at("images")},
                      {"labels", at::zeros({8}, at::kLong)}},
                     one_class);
    InfinityTrainJob bad = tiny_job(data, dir.file("bad"), 1);
    bad.data_path = one_class;
    bad.text_identity = 0.5;
    expect_job_error(bad, "text_identity needs class labels");
    bad = tiny_job(data, dir.file("bad"), 1);
    bad.text_identity = -1;
    expect_job_error(bad, "text_identity must be in [0, 100]");
}

TEST(InfinityTraining, FineTuningStartsFromTheExportsAndRefusesOtherShapes) {
    if (!SentencePieceTokenizer::available()) GTEST_SKIP() << "built without SentencePiece";
    varscope::testing::TempDir dir;
    const TinyData data = tiny_data(dir);
    std::ostringstream sink;
    const auto trained = train_infinity(tiny_job(data, dir.file("first"), 6), sink);

    // A step too small to move a weight: the fine-tuning run evaluates as the exports it
    // started from (a run that ignored --init would be a random model: loss ~0.69 per bit).
    InfinityTrainJob tune = tiny_job(data, dir.file("tune"), 1);
    tune.train.lr = 1e-30;
    tune.init_path = dir.file("first/export-fp16.safetensors");
    tune.init_t5_path = dir.file("first/t5-fp16");
    std::ostringstream out;
    const auto tuned = train_infinity(tune, out);
    EXPECT_NE(out.str().find("transformer initialised from"), std::string::npos) << out.str();
    EXPECT_NE(out.str().find("T5 encoder initialised from"), std::string::npos) << out.str();
    EXPECT_NEAR(tuned["eval_model"]["loss"].get<double>(),
                trained["eval_export"]["loss"].get<double>(), 1e-5);
    EXPECT_NEAR(tuned["eval_model"]["bit_acc"].get<double>(),
                trained["eval_export"]["bit_acc"].get<double>(), 1e-6);
    EXPECT_EQ(tuned["init"], tune.init_path);

    InfinityTrainJob deeper = tiny_job(data, dir.file("deeper"), 1);
    deeper.model.depth += 1;
    deeper.init_path = tune.init_path;
    expect_job_error(deeper, "--init " + tune.init_path + ": a transformer of");
    // grow_depth: the deeper model starts as the shallower one's function (its new block adds
    // nothing), so it evaluates as the exports did.
    deeper.grow_depth = true;
    deeper.train.lr = 1e-30;
    deeper.init_t5_path = tune.init_t5_path;
    std::ostringstream grown_out;
    const auto grown = train_infinity(deeper, grown_out);
    EXPECT_NE(grown_out.str().find("grown from 2 to 3 blocks"), std::string::npos)
        << grown_out.str();
    EXPECT_NEAR(grown["eval_model"]["loss"].get<double>(),
                trained["eval_export"]["loss"].get<double>(), 1e-5);
    InfinityTrainJob wider = tiny_job(data, dir.file("wider_grown"), 1);
    wider.model.depth += 1;
    wider.model.mlp_hidden *= 2;
    wider.grow_depth = true;
    wider.init_path = tune.init_path;
    expect_job_error(wider, "grow_depth: only the depth may differ");
    InfinityTrainJob wider_t5 = tiny_job(data, dir.file("wider"), 1);
    wider_t5.t5.d_ff *= 2;
    wider_t5.init_t5_path = tune.init_t5_path;
    expect_job_error(wider_t5, "--init-t5 " + tune.init_t5_path + ": a T5 encoder of");
}

TEST(InfinityTraining, BadJobsAreNamed) {
    if (!SentencePieceTokenizer::available()) GTEST_SKIP() << "built without SentencePiece";
    varscope::testing::TempDir dir;
    const TinyData data = tiny_data(dir);
    InfinityTrainJob j = tiny_job(data, dir.file("run"), 1);
    j.captions.pop_back();
    expect_job_error(j, "7 caption rows for 8 images");
    j = tiny_job(data, dir.file("run"), 1);
    j.captions[2].clear();
    expect_job_error(j, "row 2 has no caption");
    j = tiny_job(data, dir.file("run"), 1);
    j.t5.d_model = 48;
    expect_job_error(j, "text_channels");
    j = tiny_job(data, dir.file("run"), 1);
    j.t5.vocab_size = 100;
    expect_job_error(j, "vocab_size");
    j = tiny_job(data, dir.file("run"), 1);
    j.model.codebook_dim = 8;
    expect_job_error(j, "codebook_dim");
    j = tiny_job(data, dir.file("run"), 1);
    j.pixels = "0.25M";  // ends at 32 x 32
    j.model.num_levels = 10;
    expect_job_error(j, "latent");
}

TEST(InfinityTraining, ShippedConfigReadsAndFitsTheSizeCap) {
    std::ifstream f(varscope::testing::source_dir() + "/resources/training/emoji-infinity.json");
    ASSERT_TRUE(f.good());
    const auto j = nlohmann::json::parse(f);
    InfinityTrainJob job;
    apply_infinity_config(j, 1100, job);
    EXPECT_NO_THROW(TrainConfig::from_json(j.at("train")));
    EXPECT_EQ(job.t5.vocab_size, 1100);  // from the tokenizer when the config leaves it out
    EXPECT_EQ(job.t5.d_model, job.model.text_channels);
    EXPECT_TRUE(job.t5.gated);
    EXPECT_EQ(infinity_schedule(job.h_div_w, job.pixels).scales.back()[0], 16);
    for (const auto& item : j.items()) {
        if (item.key() == "train" || item.key() == "comment") continue;
        EXPECT_NE(
            std::find(infinity_config_keys().begin(), infinity_config_keys().end(), item.key()),
            infinity_config_keys().end())
            << item.key();
    }
    // The shipped file: about one byte per parameter with int8 (two in fp16), under 16 MiB.
    int64_t params = 0;
    for (const auto& p : InfinityTransformer(job.model)->parameters()) params += p.numel();
    EXPECT_LT(params * (job.export_int8 ? 1 : 2), 16 * 1024 * 1024 - 512 * 1024) << params;

    // Later phases fine-tune the first's exports: each shipped file parses, with the same shapes.
    auto phase = [&](const std::string& file) {
        std::ifstream f(varscope::testing::source_dir() + "/resources/training/" + file);
        EXPECT_TRUE(f.good()) << file;
        const auto jp = nlohmann::json::parse(f);  // throws (fails the test) when unreadable
        InfinityTrainJob p;
        apply_infinity_config(jp, 1100, p);
        EXPECT_NO_THROW(TrainConfig::from_json(jp.at("train"))) << file;
        EXPECT_EQ(p.model.to_json(), job.model.to_json()) << file;
        EXPECT_EQ(p.t5.to_json(), job.t5.to_json()) << file;
        return p;
    };
    auto phase_train = [&](const std::string& file) {
        std::ifstream f(varscope::testing::source_dir() + "/resources/training/" + file);
        return TrainConfig::from_json(nlohmann::json::parse(f).at("train"));
    };
    // The second phase: the noise and reweighting on.
    const InfinityTrainJob tune = phase("emoji-infinity-finetune.json");
    EXPECT_TRUE(tune.caption_noise.enabled());
    EXPECT_TRUE(tune.reweight_loss_by_scale);
    // The third phase (run in session 31, not shipped): pseudo-word fillers; 3b (prepared, not
    // yet run) continues it with milder noise at a third of the learning rate.
    const InfinityTrainJob phase3 = phase("emoji-infinity-phase3.json");
    EXPECT_DOUBLE_EQ(phase3.caption_noise.pseudo_words, 0.6);
    EXPECT_EQ(phase3.caption_noise.max_words, 8);
    const InfinityTrainJob phase3b = phase("emoji-infinity-phase3b.json");
    EXPECT_DOUBLE_EQ(phase3b.caption_noise.pseudo_words, 0.6);
    EXPECT_EQ(phase3b.caption_noise.max_words, 6);
    EXPECT_DOUBLE_EQ(phase_train("emoji-infinity-phase3b.json").lr, 1e-4);
    // Phase 4 (run in session 38): phase 3b's noise with joined captions; phase 5 continues it
    // with half as many joins.
    const InfinityTrainJob phase4 = phase("emoji-infinity-phase4.json");
    EXPECT_DOUBLE_EQ(phase4.caption_noise.join, 0.5);
    EXPECT_DOUBLE_EQ(phase4.caption_noise.pseudo_words, 0.6);
    EXPECT_DOUBLE_EQ(phase3b.caption_noise.join, 0);
    const InfinityTrainJob phase5 = phase("emoji-infinity-phase5.json");
    EXPECT_DOUBLE_EQ(phase5.caption_noise.join, 0.25);
    EXPECT_DOUBLE_EQ(phase5.caption_noise.pseudo_words, phase4.caption_noise.pseudo_words);
    EXPECT_EQ(phase_train("emoji-infinity-phase5.json").seed,
              phase_train("emoji-infinity-phase4.json").seed + 1);
    // Phase 6 (run in session 41): phase 3b's recipe with recombined captions, no joins; 6b
    // (shipped) continues it with the same captions at a lower learning rate and the next seed.
    const InfinityTrainJob phase6 = phase("emoji-infinity-phase6.json");
    EXPECT_DOUBLE_EQ(phase6.caption_noise.mix, 0.3);
    EXPECT_DOUBLE_EQ(phase6.caption_noise.join, 0);
    EXPECT_DOUBLE_EQ(phase6.caption_noise.prob, phase3b.caption_noise.prob);
    EXPECT_DOUBLE_EQ(phase_train("emoji-infinity-phase6.json").lr,
                     phase_train("emoji-infinity-phase3b.json").lr);
    const InfinityTrainJob phase6b = phase("emoji-infinity-phase6b.json");
    EXPECT_DOUBLE_EQ(phase6b.caption_noise.mix, phase6.caption_noise.mix);
    EXPECT_DOUBLE_EQ(phase6b.caption_noise.prob, phase6.caption_noise.prob);
    EXPECT_DOUBLE_EQ(phase6b.caption_noise.pseudo_words, phase6.caption_noise.pseudo_words);
    EXPECT_EQ(phase6b.caption_noise.max_words, phase6.caption_noise.max_words);
    EXPECT_DOUBLE_EQ(phase_train("emoji-infinity-phase6b.json").lr, 3e-5);
    EXPECT_EQ(phase_train("emoji-infinity-phase6b.json").seed,
              phase_train("emoji-infinity-phase6.json").seed + 1);
    // Phase 7 (prepared in session 42, run in session 46, not shipped): 6b grown to twice the
    // depth, only the depth differs.
    {
        std::ifstream f(varscope::testing::source_dir() +
                        "/resources/training/emoji-infinity-phase7.json");
        ASSERT_TRUE(f.good());
        InfinityTrainJob p7;
        apply_infinity_config(nlohmann::json::parse(f), 1100, p7);
        EXPECT_TRUE(p7.grow_depth);
        EXPECT_EQ(p7.model.depth, 2 * job.model.depth);
        InfinityConfig same = p7.model;
        same.depth = job.model.depth;
        EXPECT_EQ(same.to_json(), job.model.to_json());
        EXPECT_EQ(p7.t5.to_json(), job.t5.to_json());
        EXPECT_DOUBLE_EQ(p7.caption_noise.mix, phase6b.caption_noise.mix);
        // Its int8 export needs two files of at most 16 MiB (varscope-cli shard).
        int64_t params7 = 0;
        for (const auto& q : InfinityTransformer(p7.model)->parameters()) params7 += q.numel();
        EXPECT_GT(params7, 16 * 1024 * 1024);
        EXPECT_LT(params7, 2 * (16 * 1024 * 1024 - 512 * 1024));
    }
    // Phase 8 (prepared in session 46): 6b's shapes and captions, plus the text-identity loss.
    {
        const InfinityTrainJob p8 = phase("emoji-infinity-phase8.json");
        EXPECT_DOUBLE_EQ(p8.text_identity, 0.05);
        EXPECT_DOUBLE_EQ(p8.caption_noise.mix, phase6b.caption_noise.mix);
        EXPECT_DOUBLE_EQ(p8.caption_noise.pseudo_words, phase6b.caption_noise.pseudo_words);
        EXPECT_EQ(p8.export_int8, job.export_int8);
        EXPECT_DOUBLE_EQ(job.text_identity, 0.0);  // the earlier phases: off
        EXPECT_DOUBLE_EQ(phase6b.text_identity, 0.0);
    }

    auto error = [&](nlohmann::json c) {
        InfinityTrainJob jb;
        if (!c.contains("t5")) c["t5"] = j.at("t5");
        try {
            apply_infinity_config(c, 500, jb);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(error({{"model", {{"dept", 3}}}}).find("unknown field 'dept'"), std::string::npos);
    EXPECT_NE(error({{"caption_noise", {{"prob", 0.5}, {"pseudo_words", 1.5}}}})
                  .find("pseudo_words in [0, 1]"),
              std::string::npos);

    EXPECT_NE(error({{"model", {{"depth", "x"}}}}).find("'depth' has the wrong type"),
              std::string::npos);
    EXPECT_NE(error({{"t5", {{"d_model", 0}}}}).find("d_model"), std::string::npos);
    EXPECT_NE(error({{"cond_drop", 1.5}}).find("cond_drop"), std::string::npos);
    EXPECT_NE(error({{"pixels", "2M"}}).find("pixels"), std::string::npos);
    EXPECT_NE(error({{"caption_noise", {{"prb", 0.5}}}}).find("unknown field 'prb'"),
              std::string::npos);
    EXPECT_NE(error({{"caption_noise", {{"prob", 2}}}}).find("caption_noise"), std::string::npos);
    EXPECT_NE(error({{"caption_noise", {{"join", 1.5}}}}).find("join in [0, 1]"),
              std::string::npos);
    EXPECT_NE(error({{"text_identity", -0.1}}).find("'text_identity' must be in [0, 100]"),
              std::string::npos);
    EXPECT_NE(error({{"text_identity", "x"}}).find("'text_identity' has the wrong type"),
              std::string::npos);
    InfinityTrainJob noisy;
    nlohmann::json c = j;
    c["caption_noise"] = {{"prob", 0.5}, {"max_words", 4}, {"word_dropout", 0.1}};
    apply_infinity_config(c, 1100, noisy);
    EXPECT_DOUBLE_EQ(noisy.caption_noise.prob, 0.5);
    EXPECT_EQ(noisy.caption_noise.max_words, 4);
    EXPECT_DOUBLE_EQ(noisy.caption_noise.word_dropout, 0.1);
    EXPECT_FALSE(job.caption_noise.enabled());  // the shipped model's recipe: no noise
}

// Mixed captions: the drawn phrasing's first segment (its name), then any of the later segments
// of it and of another phrasing of the row, each once; a short name meets the category although
// no training template puts them together. Deterministic per generator state; join and mix
// together are refused by the config.
TEST(InfinityTraining, CaptionMixRecombinesTheSegmentsOfARow) {
    const std::vector<std::vector<std::string>> caps = {
        {"moon emoji", "crescent moon, sky & weather, travel & places",
         "crescent moon, noto style"},
        {"g"}};
    auto segments = [](const std::string& c) {  // its ", "-separated parts, in order
        std::vector<std::string> out;
        for (size_t a = 0;;) {
            const size_t b = c.find(", ", a);
            out.push_back(c.substr(a, b == std::string::npos ? b : b - a));
            if (b == std::string::npos) return out;
            a = b + 2;
        }
    };
    std::set<std::string> firsts, later;
    for (const auto& c : caps[0]) {
        const auto parts = segments(c);
        firsts.insert(parts.front());
        later.insert(parts.begin() + 1, parts.end());
    }
    CaptionNoise mix;
    mix.mix = 1;
    auto gen = at::detail::createCPUGenerator(6);
    std::set<std::string> seen;
    for (int i = 0; i < 200; ++i) {
        const auto p = pick_captions(caps, at::tensor({0, 1}, at::kLong), gen, mix);
        ASSERT_EQ(p.size(), 2u);
        EXPECT_EQ(p[1], "g");
        const auto segs = segments(p[0]);
        EXPECT_TRUE(firsts.count(segs[0])) << p[0];
        for (size_t s = 1; s < segs.size(); ++s) {
            EXPECT_TRUE(later.count(segs[s])) << p[0];
            EXPECT_EQ(std::count(segs.begin(), segs.end(), segs[s]), 1) << p[0];
        }
        seen.insert(p[0]);
    }
    EXPECT_TRUE(seen.count("moon emoji, travel & places")) << "no short name with its category";
    EXPECT_TRUE(seen.count("crescent moon")) << "every later segment can be left out";
    EXPECT_GT(seen.size(), 10u);
    // A skin tone is never left out: the image has it.
    const std::vector<std::vector<std::string>> toned = {
        {"santa emoji, light skin tone", "father christmas, person fantasy, people & body"}};
    std::set<std::string> with_tone;
    for (int i = 0; i < 100; ++i) {
        const auto p = pick_captions(toned, at::tensor({0}, at::kLong), gen, mix)[0];
        EXPECT_NE(p.find("light skin tone"), std::string::npos) << p;
        with_tone.insert(p);
    }
    EXPECT_TRUE(with_tone.count("santa emoji, light skin tone, people & body"));
    auto g1 = at::detail::createCPUGenerator(8), g2 = at::detail::createCPUGenerator(8);
    mix.mix = 0.5;
    EXPECT_EQ(pick_captions(caps, at::tensor({0, 0, 0, 0}, at::kLong), g1, mix),
              pick_captions(caps, at::tensor({0, 0, 0, 0}, at::kLong), g2, mix));
    std::ifstream f(varscope::testing::source_dir() + "/resources/training/emoji-infinity.json");
    auto config = nlohmann::json::parse(f);
    config["caption_noise"] = {{"join", 0.2}, {"mix", 0.2}};
    InfinityTrainJob both, over, ok;
    EXPECT_THROW(apply_infinity_config(config, 1100, both), std::invalid_argument);
    config["caption_noise"] = {{"mix", 1.5}};
    EXPECT_THROW(apply_infinity_config(config, 1100, over), std::invalid_argument);
    config["caption_noise"] = {{"mix", 0.3}};
    apply_infinity_config(config, 1100, ok);
    EXPECT_DOUBLE_EQ(ok.caption_noise.mix, 0.3);
}
