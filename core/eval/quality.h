// Distribution quality of an eval job's configs (issue #34): the FID Inception's features of
// every image (baseline and configs), carried in the shard files, and per config FID and sFID
// against the manifest's reference statistics and against the job's own baseline images, the
// Inception Score, and precision/recall against the baseline images. Features travel as
// base64 of little-endian float32 (exact: the aggregation, in shard order, gives the same
// numbers whichever rank computed a shard).
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/eval/manifest.h"
#include "core/metrics/fid_inception.h"

namespace varscope {

// The features of a shard's images per config, in generate order.
class ShardFeatures {
  public:
    void add(const std::string& config, const InceptionFeatures& f);
    // {config: {"images": n, "pool3": b64, "logits": b64 or null, "spatial": b64}}
    nlohmann::json to_json() const;

  private:
    std::map<std::string, std::vector<InceptionFeatures>> parts_;
};

// Every shard's "features" concatenated per config in shard order. ShardFileError naming the
// shard when they are missing or malformed.
std::map<std::string, InceptionFeatures> gather_features(const std::vector<nlohmann::json>& shards);

// Checks a reference statistics file before any sampling (mu 2048, sigma 2048 x 2048; mu_s /
// sigma_s of 2023 where present): ManifestError naming the manifest field and the file.
void check_reference_stats(const EvalMetricsSpec& spec);

// {config: {"feature_images", "fid": {"reference", "baseline"}, "sfid": {...},
// "inception_score": {mean, std, splits} | null, "precision_recall": {...} | null}}: a value is
// null where it does not apply (the baseline against itself, no reference, too few images).
nlohmann::json quality_metrics(const EvalMetricsSpec& spec,
                               const std::map<std::string, InceptionFeatures>& features);

// base64 of a float32 tensor's bytes, and back (std::invalid_argument on bad text or size).
std::string encode_floats(const at::Tensor& t);
at::Tensor decode_floats(const std::string& text, int64_t rows, int64_t cols);

// read(config, entry) for each config's entry of every shard's `section` object, in shard order
// (the feature sections the Inception and the emoji network write). ShardFileError naming the
// shard where the section is missing ("<shard>: <missing>") or read throws on an entry
// ("<shard>: <entry> '<config>': <what>"), each telling to delete the file.
void read_shard_sections(
    const std::vector<nlohmann::json>& shards, const std::string& section,
    const std::string& missing, const std::string& entry,
    const std::function<void(const std::string& config, const nlohmann::json& entry)>& read);

}  // namespace varscope
