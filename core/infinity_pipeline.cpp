#include "core/infinity_pipeline.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "core/io/checkpoint.h"
#include "core/sampling/autocast_scope.h"
#include "kernels/memory_stats.h"

namespace varscope {

InfinityPipeline InfinityPipeline::from(InfinityTransformer model, BsqVae vae) {
    InfinityPipeline p;
    const auto& c = model->config();
    if (vae) {
        p.quant = vae->quant_config();
        // A token holds 4 latent positions' bits with spatial patchify (Infinity-8B).
        p.quant.spatial_patchify = c.codebook_dim == 4 * p.quant.codebook_dim;
        if (p.quant.token_bits() != c.codebook_dim)
            throw std::invalid_argument("Infinity: the VAE has " +
                                        std::to_string(p.quant.codebook_dim) +
                                        " bits per position, the transformer " +
                                        std::to_string(c.codebook_dim) + " per token");
    } else {
        p.quant.codebook_dim = c.codebook_dim;
    }
    p.model = std::move(model);
    p.vae = std::move(vae);
    p.sampler = std::make_shared<InfinitySampler>(p.model, p.quant);
    return p;
}

InfinityPipeline InfinityPipeline::load(const std::string& model_path, const std::string& vae_path,
                                        const at::Device& device) {
    return from_weights(load_checkpoint(model_path), model_path, vae_path, device);
}

InfinityPipeline InfinityPipeline::from_weights(const StateDict& dict,
                                                const std::string& model_path,
                                                const std::string& vae_path,
                                                const at::Device& device, bool bf16_blocks) {
    InfinityTransformer model(InfinityConfig::infer_from(dict, model_path));
    model->load(dict, model_path);
    if (bf16_blocks) model->use_autocast_bf16();
    model->to(device);
    model->eval();
    BsqVae vae{nullptr};
    if (!vae_path.empty()) {
        vae = load_bsq_vae(vae_path);
        vae->to(device);
        vae->eval();
    }
    return from(std::move(model), std::move(vae));
}

void InfinityPipeline::stream_blocks(int64_t count) {
    if (!sampler) sampler = std::make_shared<InfinitySampler>(model, quant);
    check_stream_count(count, 0, model->config().depth);
    if (count <= streamed_blocks()) return;
    sampler->release_graphs();  // they read the weights that move
    if (auto* stream = sampler->block_stream())
        stream->grow(count);
    else
        sampler->set_block_stream(std::make_shared<InfinityBlockStream>(model, count));
    kernels::empty_cuda_cache();  // the moved blocks' device memory back to the device
}

int64_t InfinityPipeline::streamed_blocks() const {
    const InfinityBlockStream* stream = sampler ? sampler->block_stream() : nullptr;
    return stream ? stream->count() : 0;
}

namespace {

// Device bytes of one block's streamable weights (all blocks have the same shapes).
int64_t one_block_bytes(const InfinityTransformer& model, const InfinityBlockStream* stream) {
    if (stream && stream->count() > 0) return stream->host_bytes() / stream->count();
    return InfinityBlockStream::block_bytes(model->block(model->config().depth - 1));
}

}  // namespace

int64_t InfinityPipeline::stream_to_fit(int64_t need, int64_t usable) {
    const int64_t depth = model->config().depth, now = streamed_blocks();
    const int64_t block = one_block_bytes(model, sampler ? sampler->block_stream() : nullptr);
    stream_blocks(blocks_to_stream(need, usable, block, now, depth));
    return streamed_blocks();
}

int64_t InfinityPipeline::reclaimable_bytes() const {
    const int64_t depth = model->config().depth, now = streamed_blocks();
    const int64_t block = one_block_bytes(model, sampler ? sampler->block_stream() : nullptr);
    return (blocks_freed(depth) - blocks_freed(now)) * block;
}

InfinityPipeline::Output InfinityPipeline::generate(const InfinityText& text,
                                                    const InfinitySchedule& schedule,
                                                    const InfinitySampleOptions& options,
                                                    SamplingHooks* hooks, ProbeSink* probe,
                                                    bool decode, bool low_memory) const {
    // The pipeline's own sampler keeps its CUDA graphs between calls; a pipeline whose model
    // was swapped after from() samples with a fresh one.
    std::shared_ptr<InfinitySampler> own = sampler;
    if (!own || own->transformer().get() != model.get())
        own = std::make_shared<InfinitySampler>(model, quant);
    Output out;
    out.sample = own->sample(text, schedule, options, hooks, probe);
    if (decode && vae) {
        c10::InferenceMode guard;
        if (low_memory && out.sample.summed_codes.is_cuda()) {
            out.sample.summed_codes = out.sample.summed_codes.clone();  // off the graphs' buffers
            own->release_graphs();
            kernels::empty_cuda_cache();
        }
        const auto t0 = std::chrono::steady_clock::now();
        BsqVae decoder = vae;  // decode() is not const; the holder shares the module
        {  // the official bf16 mode decodes under torch.autocast (autocast_scope.h)
            CudaAutocastScope scope(model->autocast_bf16() && out.sample.summed_codes.is_cuda());
            out.images = decoder->decode_01(out.sample.summed_codes).to(at::kFloat);
        }
        synchronize_device(out.images.device());
        out.decode_millis =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
    }
    return out;
}

InfinityText load_text_features(const std::string& path) {
    const StateDict d = load_checkpoint(path);
    auto get = [&](const char* name) -> const at::Tensor& {
        auto it = d.find(name);
        if (it == d.end())
            throw CheckpointError(path + ": text features need a tensor '" + name + "'");
        return it->second;
    };
    const auto& kv = get("kv_compact");
    const auto lens = get("lens").to(at::kLong).reshape({-1});
    InfinityText t;
    t.kv_compact = kv.to(at::kFloat);
    int64_t total = 0;
    for (int64_t i = 0; i < lens.numel(); ++i) {
        t.lens.push_back(lens[i].item<int64_t>());
        if (t.lens.back() < 1) throw CheckpointError(path + ": 'lens' must be positive");
        total += t.lens.back();
    }
    if (kv.dim() != 2 || kv.size(0) != total)
        throw CheckpointError(
            path + ": 'kv_compact' must be (sum(lens) = " + std::to_string(total) + ", channels)");
    return t;
}

InfinityText repeat_text_rows(const InfinityText& t, int64_t rows) {
    if (rows < 1 || t.lens.empty())
        throw std::invalid_argument("Infinity: " + std::to_string(rows) +
                                    " text rows asked of a text with " +
                                    std::to_string(t.lens.size()) + " (at least one each)");
    std::vector<int64_t> starts;
    int64_t offset = 0;
    for (int64_t len : t.lens) {
        starts.push_back(offset);
        offset += len;
    }
    InfinityText out;
    std::vector<at::Tensor> parts;
    for (int64_t i = 0; i < rows; ++i) {
        const size_t k = static_cast<size_t>(i) % t.lens.size();
        parts.push_back(t.kv_compact.narrow(0, starts[k], t.lens[k]));
        out.lens.push_back(t.lens[k]);
    }
    out.kv_compact = at::cat(parts, 0);
    return out;
}

}  // namespace varscope
