#include "core/analysis/prompt_following.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace varscope::analysis {

std::vector<HeldOutPrompt> pick_prompts(const std::vector<std::vector<std::string>>& phrasings,
                                        const at::Tensor& labels, int64_t count) {
    const auto n = static_cast<int64_t>(phrasings.size());
    if (count < 1) throw std::invalid_argument("prompt following: count must be at least 1");
    if (labels.dim() != 1 || labels.size(0) != n)
        throw std::invalid_argument("prompt following: " + std::to_string(n) +
                                    " caption rows but labels of shape " +
                                    std::to_string(labels.dim() == 1 ? labels.size(0) : -1));
    // Which rows each phrasing describes.
    std::map<std::string, std::vector<int64_t>> rows_of;
    for (int64_t r = 0; r < n; ++r)
        for (const auto& t : phrasings[static_cast<size_t>(r)]) rows_of[t].push_back(r);
    if (static_cast<int64_t>(rows_of.size()) < count)
        throw std::invalid_argument("prompt following: the pack has " +
                                    std::to_string(rows_of.size()) +
                                    " distinct phrasings, fewer than " + std::to_string(count));
    const at::Tensor lab = labels.to(at::kCPU).to(at::kLong).contiguous();
    std::vector<HeldOutPrompt> out;
    std::set<std::string> taken;
    // Evenly spaced rows; a row whose phrasing was taken gives way to the next row.
    for (int64_t i = 0; static_cast<int64_t>(out.size()) < count; ++i) {
        const int64_t start = (i * n) / count % n;
        for (int64_t k = 0; k < n; ++k) {
            const int64_t r = (start + k) % n;
            const auto& h = phrasings[static_cast<size_t>(r)];
            if (h.empty()) continue;
            const auto t = static_cast<size_t>(i) % h.size();
            if (!taken.insert(h[t]).second) continue;
            HeldOutPrompt p;
            p.text = h[t];
            p.row = r;
            p.label = lab.data_ptr<int64_t>()[r];
            p.template_index = static_cast<int64_t>(t);
            p.intended_rows = rows_of.at(h[t]);
            out.push_back(std::move(p));
            break;
        }
    }
    return out;
}

NearestRows nearest_rows(const at::Tensor& images, const at::Tensor& dataset, int64_t chunk) {
    if (images.dim() != 4 || dataset.dim() != 4 || images.size(1) != dataset.size(1) ||
        images.size(2) != dataset.size(2) || images.size(3) != dataset.size(3))
        throw std::invalid_argument("nearest rows: images " + std::to_string(images.dim()) +
                                    "-d and data set of different image sizes");
    const int64_t b = images.size(0), n = dataset.size(0);
    const at::Tensor x = images.to(at::kCPU).to(at::kDouble).reshape({b, -1});
    const at::Tensor x2 = x.pow(2).sum(1, true);  // (B, 1)
    at::Tensor best = at::full({b}, INFINITY, at::kDouble);
    at::Tensor best_row = at::zeros({b}, at::kLong);
    for (int64_t s = 0; s < n; s += chunk) {
        const int64_t e = std::min(n, s + chunk);
        const at::Tensor y =
            dataset.slice(0, s, e).to(at::kCPU).to(at::kDouble).div(255.0).reshape({e - s, -1});
        // Squared distances by the expansion: (B, e - s), in float64 so near-ties order right.
        const at::Tensor d = x2 + y.pow(2).sum(1).unsqueeze(0) - 2.0 * at::matmul(x, y.t());
        const auto [v, idx] = d.min(1);
        const at::Tensor better = v < best;  // strict: ties keep the lower row
        best = at::where(better, v, best);
        best_row = at::where(better, idx + s, best_row);
    }
    // PSNR of the chosen rows, computed directly.
    const at::Tensor y = dataset.index_select(0, best_row.to(dataset.device()))
                             .to(at::kCPU)
                             .to(at::kDouble)
                             .div(255.0)
                             .reshape({b, -1});
    const at::Tensor mse = (x - y).pow(2).mean(1).clamp_min(1e-12);
    return {best_row, mse.log10().mul(-10.0)};
}

at::Tensor nearest_feature_rows(const at::Tensor& features, const at::Tensor& dataset_features) {
    if (features.dim() != 2 || dataset_features.dim() != 2 ||
        features.size(1) != dataset_features.size(1))
        throw std::invalid_argument(
            "nearest feature rows: features of dimension " +
            std::to_string(features.dim() == 2 ? features.size(1) : -1) +
            " against the data set's " +
            std::to_string(dataset_features.dim() == 2 ? dataset_features.size(1) : -1));
    const at::Tensor x = features.to(at::kCPU).to(at::kDouble);
    const at::Tensor y = dataset_features.to(at::kCPU).to(at::kDouble);
    // argmin returns the first minimum: ties go to the lowest row.
    return at::cdist(x, y).argmin(1);
}

void score_batch(PromptFollowing& result, const at::Tensor& images,
                 const std::vector<int64_t>& prompt_index, uint64_t seed, const at::Tensor& dataset,
                 const at::Tensor& labels, const FeatureJudgeBatch* judge) {
    const auto b = static_cast<int64_t>(prompt_index.size());
    if (images.size(0) != b)
        throw std::invalid_argument("prompt following: " + std::to_string(images.size(0)) +
                                    " images for " + std::to_string(b) + " prompts");
    // A result is judged by features throughout or not at all (its rates would mix otherwise).
    if (!result.samples.empty() && result.judged_by_features != (judge != nullptr))
        throw std::invalid_argument(
            "prompt following: every batch needs the feature judge, or none does");
    at::Tensor feature_rows, predicted;
    if (judge) {
        if (judge->features.size(0) != b || judge->predicted.numel() != b)
            throw std::invalid_argument("prompt following: the feature judge has " +
                                        std::to_string(judge->features.size(0)) +
                                        " images' features for " + std::to_string(b) + " prompts");
        feature_rows = nearest_feature_rows(judge->features, judge->dataset_features);
        predicted = judge->predicted.to(at::kCPU).to(at::kLong).reshape({b});
        result.judged_by_features = true;
    }
    const NearestRows nn = nearest_rows(images, dataset);
    const at::Tensor lab = labels.to(at::kCPU).to(at::kLong).contiguous();
    for (size_t i = 0; i < prompt_index.size(); ++i) {
        const auto& p = result.prompts.at(static_cast<size_t>(prompt_index[i]));
        PromptSample s;
        s.prompt = prompt_index[i];
        s.seed = seed;
        s.nearest_row = nn.rows[static_cast<int64_t>(i)].item<int64_t>();
        s.nearest_psnr = nn.psnr[static_cast<int64_t>(i)].item<double>();
        s.follows = std::find(p.intended_rows.begin(), p.intended_rows.end(), s.nearest_row) !=
                    p.intended_rows.end();
        s.class_match = lab.data_ptr<int64_t>()[s.nearest_row] == p.label;
        if (judge) {
            const auto i64 = static_cast<int64_t>(i);
            s.feature_row = feature_rows[i64].item<int64_t>();
            s.predicted_class = predicted[i64].item<int64_t>();
            s.feature_follows = std::find(p.intended_rows.begin(), p.intended_rows.end(),
                                          s.feature_row) != p.intended_rows.end();
            s.feature_class_match = lab.data_ptr<int64_t>()[s.feature_row] == p.label;
            s.classifier_match = s.predicted_class == p.label;
        }
        result.samples.push_back(s);
    }
}

namespace {
template <typename Pred>
double share(const std::vector<PromptSample>& samples, Pred pred) {
    if (samples.empty()) return 0;
    return static_cast<double>(std::count_if(samples.begin(), samples.end(), pred)) /
           static_cast<double>(samples.size());
}

// Per prompt: {samples, following}.
std::map<int64_t, std::pair<int64_t, int64_t>> per_prompt(const PromptFollowing& r) {
    std::map<int64_t, std::pair<int64_t, int64_t>> m;
    for (const auto& s : r.samples) {
        ++m[s.prompt].first;
        m[s.prompt].second += s.follows;
    }
    return m;
}
}  // namespace

double PromptFollowing::follow_rate() const {
    return share(samples, [](const PromptSample& s) { return s.follows; });
}
double PromptFollowing::class_rate() const {
    return share(samples, [](const PromptSample& s) { return s.class_match; });
}
double PromptFollowing::feature_follow_rate() const {
    return share(samples, [](const PromptSample& s) { return s.feature_follows; });
}
double PromptFollowing::feature_class_rate() const {
    return share(samples, [](const PromptSample& s) { return s.feature_class_match; });
}
double PromptFollowing::classifier_rate() const {
    return share(samples, [](const PromptSample& s) { return s.classifier_match; });
}
namespace {
std::vector<PromptSample> samples_of_template(const PromptFollowing& r, int64_t t) {
    std::vector<PromptSample> of;
    for (const auto& s : r.samples)
        if (r.prompts.at(static_cast<size_t>(s.prompt)).template_index == t) of.push_back(s);
    return of;
}
}  // namespace
double PromptFollowing::follow_rate_of_template(int64_t t) const {
    return share(samples_of_template(*this, t), [](const PromptSample& s) { return s.follows; });
}
double PromptFollowing::classifier_rate_of_template(int64_t t) const {
    return share(samples_of_template(*this, t),
                 [](const PromptSample& s) { return s.classifier_match; });
}
int64_t PromptFollowing::template_count() const {
    int64_t n = 0;
    for (const auto& p : prompts) n = std::max(n, p.template_index + 1);
    return n;
}
double PromptFollowing::mean_psnr() const {
    double sum = 0;
    for (const auto& s : samples) sum += s.nearest_psnr;
    return samples.empty() ? 0 : sum / static_cast<double>(samples.size());
}
int64_t PromptFollowing::prompts_always() const {
    int64_t k = 0;
    for (const auto& [p, c] : per_prompt(*this)) k += c.second == c.first;
    return k;
}
int64_t PromptFollowing::prompts_never() const {
    int64_t k = 0;
    for (const auto& [p, c] : per_prompt(*this)) k += c.second == 0;
    return k;
}

nlohmann::json to_json(const PromptFollowing& r) {
    nlohmann::json prompts = nlohmann::json::array(), samples = nlohmann::json::array();
    nlohmann::json by_template = nlohmann::json::array();  // [template] = follow rate
    for (int64_t t = 0; t < r.template_count(); ++t)
        by_template.push_back(r.follow_rate_of_template(t));
    for (const auto& p : r.prompts)
        prompts.push_back({{"text", p.text},
                           {"row", p.row},
                           {"label", p.label},
                           {"template", p.template_index},
                           {"intended_rows", p.intended_rows}});
    for (const auto& s : r.samples) {
        nlohmann::json j = {{"prompt", s.prompt},           {"seed", s.seed},
                            {"nearest_row", s.nearest_row}, {"nearest_psnr", s.nearest_psnr},
                            {"follows", s.follows},         {"class_match", s.class_match}};
        if (r.judged_by_features) {
            j["feature_row"] = s.feature_row;
            j["predicted_class"] = s.predicted_class;
            j["feature_follows"] = s.feature_follows;
            j["feature_class_match"] = s.feature_class_match;
            j["classifier_match"] = s.classifier_match;
        }
        samples.push_back(std::move(j));
    }
    nlohmann::json features = nullptr;  // null: not judged by the feature network
    if (r.judged_by_features) {
        nlohmann::json classifier_by_template = nlohmann::json::array();
        for (int64_t t = 0; t < r.template_count(); ++t)
            classifier_by_template.push_back(r.classifier_rate_of_template(t));
        features = {{"measure",
                     "the emoji feature network (256-d features, Euclidean): the nearest packed "
                     "image is one the phrasing describes (follow_rate) / has its class "
                     "(class_rate); the network's predicted class is the intended one "
                     "(classifier_rate)"},
                    {"follow_rate", r.feature_follow_rate()},
                    {"class_rate", r.feature_class_rate()},
                    {"classifier_rate", r.classifier_rate()},
                    {"classifier_rate_by_template", classifier_by_template}};
    }
    return {{"measure",
             "nearest packed emoji64 image by pixel MSE (RGB, [0, 1]) is one the phrasing "
             "describes"},
            {"feature_judge", features},
            {"follow_rate", r.follow_rate()},
            {"class_rate", r.class_rate()},
            {"follow_rate_by_template", by_template},
            {"mean_nearest_psnr", r.mean_psnr()},
            {"prompts_always", r.prompts_always()},
            {"prompts_never", r.prompts_never()},
            {"n_prompts", r.prompts.size()},
            {"n_samples", r.samples.size()},
            {"prompts", prompts},
            {"samples", samples}};
}

std::string to_csv(const PromptFollowing& r) {
    std::ostringstream o;
    o << "prompt,template,seed,text,row,nearest_row,nearest_psnr,follows,class_match,"
         "feature_row,predicted_class,feature_follows,feature_class_match,classifier_match\n";
    for (const auto& s : r.samples) {
        const auto& p = r.prompts.at(static_cast<size_t>(s.prompt));
        std::string text = p.text;  // quoted, inner quotes doubled
        for (size_t i = text.find('"'); i != std::string::npos; i = text.find('"', i + 2))
            text.insert(i, "\"");
        o << s.prompt << ',' << p.template_index << ',' << s.seed << ",\"" << text << "\"," << p.row
          << ',' << s.nearest_row << ',' << s.nearest_psnr << ',' << s.follows << ','
          << s.class_match << ',' << s.feature_row << ',' << s.predicted_class << ','
          << s.feature_follows << ',' << s.feature_class_match << ',' << s.classifier_match << '\n';
    }
    return o.str();
}

}  // namespace varscope::analysis
