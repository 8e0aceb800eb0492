#include "core/training/emoji_feature_trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <torch/optim/adamw.h>

#include <chrono>
#include <cmath>
#include <ostream>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/io/json_fields.h"
#include "core/io/module_binding.h"
#include "core/metrics/feature_stats.h"

namespace varscope {
namespace {

const char* const kStyleNames[] = {"google", "twitter"};  // packed style index = position

int64_t style_index(const std::string& name) {
    for (int64_t i = 0; i < 2; ++i)
        if (name == kStyleNames[i]) return i;
    throw std::invalid_argument(
        "config: 'train_styles' entries must be \"google\" or \"twitter\", "
        "got \"" +
        name + "\"");
}

at::Tensor uniform(at::Generator& gen, int64_t n, double lo, double hi) {
    return at::rand({n}, gen, at::TensorOptions().dtype(at::kFloat)).mul(hi - lo).add(lo);
}

// Per-image values broadcast over (N, C, H, W).
at::Tensor per_image(const at::Tensor& v, const at::Tensor& like) {
    return v.to(like.device()).view({-1, 1, 1, 1});
}

// The packed rows' styles; without a "styles" tensor every row counts as both.
at::Tensor load_styles(const std::string& path, int64_t rows) {
    const auto d =
        load_safetensors_selected(path, [](const std::string& n) { return n == "styles"; });
    const auto it = d.find("styles");
    if (it == d.end()) return at::Tensor();
    if (it->second.dim() != 1 || it->second.size(0) != rows)
        throw std::invalid_argument(path + ": 'styles' must be (N) with N = number of images");
    return it->second.to(at::kLong);
}

// Features and predicted class of every row (no augmentation), in order: one pass serves every
// accuracy of the report and the reference statistics.
std::pair<at::Tensor, at::Tensor> score_all(EmojiFeatureNet& net, const ImageDataset& data,
                                            int64_t batch) {
    c10::InferenceMode guard;
    std::vector<at::Tensor> features, predicted;
    for (int64_t b = 0; b < data.size(); b += batch) {
        const auto rows = at::arange(b, std::min(b + batch, data.size()), at::kLong);
        const auto f = net->features(data.batch_images(rows));
        features.push_back(f.cpu());
        predicted.push_back(net->logits_of(f).argmax(1).cpu());
    }
    return {at::cat(features, 0), at::cat(predicted, 0)};
}

// {"images", "accuracy" (over images), "class_mean_accuracy" (each class's accuracy, averaged
// over the classes present: what the eval's per-class requests see; classes with skin tones
// have 12 images, most others 2)} of the given rows; null accuracies for no rows.
nlohmann::json accuracy_of(const at::Tensor& predicted, const at::Tensor& labels,
                           const at::Tensor& rows, int64_t classes) {
    if (rows.numel() == 0)
        return {{"images", 0}, {"accuracy", nullptr}, {"class_mean_accuracy", nullptr}};
    const auto l = labels.index_select(0, rows);
    const auto hit = predicted.index_select(0, rows).eq(l).to(at::kDouble);
    const auto count = at::bincount(l, {}, classes).to(at::kDouble);
    const auto correct = at::bincount(l, hit, classes);
    const auto present = count.gt(0);
    return {
        {"images", rows.numel()},
        {"accuracy", hit.mean().item<double>()},
        {"class_mean_accuracy",
         correct.masked_select(present).div(count.masked_select(present)).mean().item<double>()}};
}

// Training rows drawn with probability 1 / (images of their class), so that a class with 12
// images (skin tones x styles) is not seen 6x as often as one with 2.
at::Tensor class_weights(const at::Tensor& labels, int64_t classes) {
    const auto count = at::bincount(labels, {}, classes).to(at::kDouble);
    return count.index_select(0, labels).reciprocal();
}

}  // namespace

nlohmann::json EmojiAugment::to_json() const {
    return {{"shift_px", shift_px},     {"scale_min", scale_min}, {"scale_max", scale_max},
            {"brightness", brightness}, {"contrast", contrast},   {"saturation", saturation}};
}

EmojiAugment EmojiAugment::from_json(const nlohmann::json& j) {
    EmojiAugment a;
    if (!j.is_object()) throw std::invalid_argument("augment config: expected a JSON object");
    require_known_fields(j, a.to_json(), "augment config");
    for (auto [key, value] : {std::pair{"shift_px", &a.shift_px},
                              {"scale_min", &a.scale_min},
                              {"scale_max", &a.scale_max},
                              {"brightness", &a.brightness},
                              {"contrast", &a.contrast},
                              {"saturation", &a.saturation}}) {
        if (!j.contains(key)) continue;
        if (!j[key].is_number())
            throw std::invalid_argument(std::string("augment config: '") + key +
                                        "' must be a number");
        *value = j[key].get<double>();
        if (!std::isfinite(*value) || *value < 0)
            throw std::invalid_argument(std::string("augment config: '") + key + "' must be >= 0");
    }
    if (!(a.scale_min > 0 && a.scale_min <= a.scale_max))
        throw std::invalid_argument("augment config: need 0 < 'scale_min' <= 'scale_max'");
    if (a.brightness >= 1 || a.contrast >= 1 || a.saturation >= 1 || a.shift_px > 32)
        throw std::invalid_argument(
            "augment config: 'brightness', 'contrast', 'saturation' must be < 1 and 'shift_px' "
            "<= 32");
    return a;
}

at::Tensor augment_emoji_batch(const at::Tensor& images, const EmojiAugment& a,
                               at::Generator& gen) {
    const int64_t n = images.size(0);
    // Output pixel p samples input at p / scale + shift (normalised coordinates).
    const auto inv_scale = uniform(gen, n, a.scale_min, a.scale_max).reciprocal();
    const double max_shift = 2.0 * a.shift_px / static_cast<double>(images.size(3));
    const auto tx = uniform(gen, n, -max_shift, max_shift);
    const auto ty = uniform(gen, n, -max_shift, max_shift);
    const auto zero = at::zeros({n});
    const auto theta = at::stack({inv_scale, zero, tx, zero, inv_scale, ty}, 1).view({n, 2, 3});
    const auto grid = at::affine_grid_generator(theta.to(images.device(), images.scalar_type()),
                                                images.sizes(), /*align_corners=*/false);
    // Shifted so that zero padding is white (+1).
    auto x = at::grid_sampler(images - 1, grid, /*bilinear*/ 0, /*zeros*/ 0, false) + 1;
    x = x.add(1).mul(0.5);  // [0, 1]
    x = x * per_image(uniform(gen, n, 1 - a.brightness, 1 + a.brightness), x);
    const auto mean = x.mean({1, 2, 3}, /*keepdim=*/true);
    x = (x - mean) * per_image(uniform(gen, n, 1 - a.contrast, 1 + a.contrast), x) + mean;
    const auto gray =
        (x.select(1, 0) * 0.299 + x.select(1, 1) * 0.587 + x.select(1, 2) * 0.114).unsqueeze(1);
    x = (x - gray) * per_image(uniform(gen, n, 1 - a.saturation, 1 + a.saturation), x) + gray;
    return x.clamp(0, 1).mul(2).sub(1);
}

void apply_emoji_feature_config(const nlohmann::json& j, EmojiFeatureTrainJob& job) {
    if (j.contains("model")) job.model = EmojiFeatureConfig::from_json(j["model"]);
    if (j.contains("augment")) job.augment = EmojiAugment::from_json(j["augment"]);
    if (j.contains("label_smoothing")) {
        if (!j["label_smoothing"].is_number())
            throw std::invalid_argument("config: 'label_smoothing' must be a number");
        job.label_smoothing = j["label_smoothing"].get<double>();
        if (!(job.label_smoothing >= 0 && job.label_smoothing < 1))
            throw std::invalid_argument("config: 'label_smoothing' must be in [0, 1)");
    }
    if (j.contains("balance_classes")) {
        if (!j["balance_classes"].is_boolean())
            throw std::invalid_argument("config: 'balance_classes' must be true or false");
        job.balance_classes = j["balance_classes"].get<bool>();
    }
    if (j.contains("train_styles")) {
        const auto& s = j["train_styles"];
        if (!s.is_array() || s.empty() || s.size() > 2)
            throw std::invalid_argument(
                "config: 'train_styles' must be a list of one or two of \"google\", \"twitter\"");
        job.train_styles.clear();
        for (const auto& e : s) {
            if (!e.is_string())
                throw std::invalid_argument("config: 'train_styles' entries must be strings");
            style_index(e.get<std::string>());
            job.train_styles.push_back(e.get<std::string>());
        }
    }
}

nlohmann::json train_emoji_features(const EmojiFeatureTrainJob& job, std::ostream& out) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    job.model.validate();
    ImageDataset data = prepare_training(job.train, job.data_path);
    const at::Device dev = data.images.device();
    if (data.images.size(2) != kEmojiFeatureImageSize ||
        data.images.size(3) != kEmojiFeatureImageSize)
        throw std::invalid_argument("train emoji-features: " + job.data_path + " holds " +
                                    std::to_string(data.images.size(3)) + "x" +
                                    std::to_string(data.images.size(2)) +
                                    " images, the network takes 64x64");
    if (data.num_classes > job.model.num_classes)
        throw std::invalid_argument(
            "train emoji-features: the data has " + std::to_string(data.num_classes) +
            " classes, model.num_classes is " + std::to_string(job.model.num_classes));
    const at::Tensor styles = load_styles(job.data_path, data.size());
    auto trained = at::zeros({data.size()}, at::kBool);
    std::vector<int64_t> trained_styles;
    for (const auto& s : job.train_styles) trained_styles.push_back(style_index(s));
    if (!styles.defined()) {
        if (trained_styles.size() < 2)
            throw std::invalid_argument("train emoji-features: " + job.data_path +
                                        " has no 'styles' tensor, so 'train_styles' cannot "
                                        "pick one (pack it again with pack-emoji)");
        trained.fill_(true);
    } else {
        for (int64_t s : trained_styles) trained.logical_or_(styles.eq(s));
    }
    const at::Tensor train_rows = trained.nonzero().view({-1});
    const at::Tensor heldout_rows = trained.logical_not().nonzero().view({-1});
    if (train_rows.numel() == 0)
        throw std::invalid_argument("train emoji-features: no images of the training styles");

    RunDirectory run(job.run_dir);
    torch::manual_seed(job.train.seed);
    EmojiFeatureNet net(job.model);
    net->to(dev);
    net->train();
    torch::optim::AdamW opt(
        net->parameters(),
        torch::optim::AdamWOptions(job.train.lr).weight_decay(job.train.weight_decay));
    const nlohmann::json cfg_json = job.model.to_json();
    int64_t step = run.resume(*net, opt, run.path("last.safetensors"));
    if (step > 0) out << "resumed at step " << step << "\n";
    BatchSampler sampler(train_rows.numel(), job.train.batch, job.train.seed);
    auto gen = at::detail::createCPUGenerator(job.train.seed + 101);
    const at::Tensor train_labels = data.labels.index_select(0, train_rows.to(dev)).cpu();
    const at::Tensor weights = class_weights(train_labels, job.model.num_classes);
    const int64_t batch = std::min(job.train.batch, train_rows.numel());
    auto next_rows = [&] {
        if (!job.balance_classes) return train_rows.index_select(0, sampler.next());
        return train_rows.index_select(0, at::multinomial(weights, batch, true, gen));
    };
    for (int64_t s = 0; s < step; ++s) {  // same batches and draws as an unbroken run
        next_rows();
        for (int k = 0; k < 6; ++k) at::rand({batch}, gen);
    }
    TimeBudget budget(job.train.max_seconds);
    for (; step < job.train.steps; ++step) {
        if (step % 10 == 0 && budget.spent(step, out)) break;
        set_learning_rate(opt, job.train.lr_at(step));
        const auto rows = next_rows();
        const auto img = augment_emoji_batch(data.batch_images(rows), job.augment, gen);
        const auto labels = data.labels.index_select(0, rows.to(dev));
        const auto logits = net->logits_of(net->features(img));
        const auto loss = at::cross_entropy_loss(logits, labels, {}, at::Reduction::Mean, -100,
                                                 job.label_smoothing);
        opt.zero_grad();
        loss.backward();
        opt.step();
        if (step % job.train.log_every == 0 || step + 1 == job.train.steps) {
            nlohmann::json rec = {
                {"step", step},
                {"loss", loss.item<double>()},
                {"batch_accuracy",
                 logits.argmax(1).eq(labels).to(at::kFloat).mean().item<double>()},
                {"lr", job.train.lr_at(step)},
                {"seconds", std::chrono::duration<double>(Clock::now() - t0).count()}};
            run.log(rec);
            out << rec.dump() << std::endl;
        }
        if ((step + 1) % job.train.checkpoint_every == 0) run.save(*net, opt, step + 1, cfg_json);
    }
    run.save(*net, opt, step, cfg_json);
    net->eval();

    nlohmann::json report;
    const auto [features, predicted] = score_all(net, data, 256);
    const at::Tensor labels = data.labels.cpu();
    const int64_t classes = job.model.num_classes;
    report["train_styles"] = job.train_styles;
    report["balance_classes"] = job.balance_classes;
    report["train"] = accuracy_of(predicted, labels, train_rows, classes);
    if (styles.defined()) {
        nlohmann::json per_style = nlohmann::json::object();
        for (int64_t s = 0; s < 2; ++s)
            per_style[kStyleNames[s]] =
                accuracy_of(predicted, labels, styles.eq(s).nonzero().view({-1}), classes);
        report["by_style"] = per_style;
    }
    // The cross-style check: the styles not trained on (null without).
    report["heldout"] = accuracy_of(predicted, labels, heldout_rows, classes);
    // The data set's own Frechet reference: every packed image, both styles.
    const FeatureStats ref = feature_stats(features.to(at::kDouble));
    report["steps"] = step;
    report["seconds"] = std::chrono::duration<double>(Clock::now() - t0).count();
    report["train_config"] = job.train.to_json();
    report["augment"] = job.augment.to_json();
    report["label_smoothing"] = job.label_smoothing;
    report["model"] = cfg_json;

    const std::map<std::string, std::string> meta = {
        {"varscope.kind", kEmojiFeaturesKind},
        {"varscope.config", cfg_json.dump()},
        {"varscope.classes",
         "emoji-classes.json: emoji64's emoji.json order (pack-emoji labels), " +
             std::to_string(job.model.num_classes) + " classes"},
        {"varscope.preprocessing",
         "RGB uint8 (float [0,1] quantised), antialiased bilinear resize to 64x64 when not "
         "64x64, x/127.5-1"},
        {"varscope.reference", "mu/sigma of the features of all " + std::to_string(data.size()) +
                                   " packed emoji64 images (google and twitter)"},
        {"varscope.training", report.dump()}};
    StateDict full = module_state_dict(*net);
    StateDict half;
    for (auto& [name, t] : full) {
        full[name] = t.detach().cpu();
        half[name] = t.detach().to(at::kCPU, at::kHalf);
    }
    full[kEmojiReferenceMu] = half[kEmojiReferenceMu] = ref.mu;
    full[kEmojiReferenceSigma] = half[kEmojiReferenceSigma] = ref.sigma;
    save_safetensors(full, run.path("final.safetensors"), meta);
    save_safetensors(half, run.path("export-fp16.safetensors"), meta);
    run.log({{"final", report}});
    return report;
}

}  // namespace varscope
