#include "core/pipeline.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <sstream>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/models/detect.h"

namespace varscope {
namespace {

StateDict load_family(const std::string& path, ModelFamily want, const char* role) {
    if (path.empty()) throw CheckpointError(std::string("no ") + role + " checkpoint given");
    StateDict d = load_checkpoint(path);
    const DetectedFamily got = detect_family_nested(d);
    if (got.family != want)
        throw CheckpointError(path + ": expected a " + family_name(want) + " checkpoint for the " +
                              role + ", but its tensors look like " + family_name(got.family));
    return got.prefix.empty() ? d : select_prefix(d, got.prefix);
}

at::ScalarType to_scalar(Precision p) {
    switch (p) {
        case Precision::Fp16:
            return at::kHalf;
        case Precision::Bf16:
            return at::kBFloat16;
        case Precision::Fp32:
            break;
    }
    return at::kFloat;
}

// Moves the models to the device and precision of `o` and wraps them in a sampler set up for it.
std::shared_ptr<VarSampler> placed_sampler(VarTransformer& var, Vqvae& vae, const LoadOptions& o) {
    const at::Device dev = parse_device(o.device);
    if (o.autocast && o.precision != Precision::Bf16)
        throw std::invalid_argument("autocast is a bf16 mode (precision bf16-autocast)");
    if (o.tf32 && o.precision != Precision::Fp32)
        throw std::invalid_argument("tf32 is an fp32 mode (precision tf32)");
    var->to(dev, o.autocast ? at::kFloat : to_scalar(o.precision));
    if (o.autocast) var->use_autocast_bf16();
    vae->to(dev);
    var->eval();
    vae->eval();
    auto sampler = std::make_shared<VarSampler>(var, vae);
    sampler->set_tf32(o.tf32);
    sampler->set_exec_policy(o.exec);
    return sampler;
}

}  // namespace

bool cuda_available() {
    return torch::cuda::is_available();
}

Precision parse_precision(const std::string& s) {
    if (s == "fp32" || s == "float32") return Precision::Fp32;
    if (s == "fp16" || s == "float16") return Precision::Fp16;
    if (s == "bf16" || s == "bfloat16") return Precision::Bf16;
    throw std::invalid_argument("precision must be fp32, fp16 or bf16, got '" + s + "'");
}

LoadOptions load_options(const std::string& device, const std::string& precision) {
    if (precision == "bf16-autocast") return {device, Precision::Bf16, true};
    if (precision == "tf32") return {device, Precision::Fp32, false, true};
    return {device, parse_precision(precision)};
}

at::Device parse_device(const std::string& s) {
    at::Device dev(at::kCPU);
    try {
        dev = at::Device(s);
    } catch (const c10::Error&) {
        throw std::invalid_argument("device must be cpu, cuda or cuda:N, got '" + s + "'");
    }
    if (dev.is_cuda()) {
        if (!cuda_available())
            throw std::invalid_argument("device '" + s +
                                        "' asked for, but no CUDA device is available");
        if (dev.has_index() && dev.index() >= static_cast<int>(torch::cuda::device_count()))
            throw std::invalid_argument("device '" + s + "' does not exist (" +
                                        std::to_string(torch::cuda::device_count()) +
                                        " CUDA devices)");
    } else if (!dev.is_cpu()) {
        throw std::invalid_argument("device must be cpu, cuda or cuda:N, got '" + s + "'");
    }
    return dev;
}

VarPipeline VarPipeline::load(const VarModelFiles& f, const LoadOptions& o) {
    return from_weights(load_family(f.var_path, ModelFamily::VarTransformer, "VAR transformer"), f,
                        o);
}

VarPipeline VarPipeline::from_weights(StateDict var_sd, const VarModelFiles& f,
                                      const LoadOptions& o) {
    StateDict vae_sd = load_family(f.vae_path, ModelFamily::MultiScaleVqvae, "VQVAE");
    VarConfig vc = VarConfig::infer_from(var_sd, f.patch_nums);
    VqvaeConfig ac = VqvaeConfig::infer_from(vae_sd, vc.patch_nums);
    VarTransformer var(vc);
    var->load(var_sd, f.var_path);
    Vqvae vae(ac);
    vae->load(vae_sd, f.vae_path);
    return VarPipeline(placed_sampler(var, vae, o));
}

VarPipeline VarPipeline::random(const VarConfig& vc, const VqvaeConfig& ac, uint64_t seed,
                                const LoadOptions& o) {
    // The modules' default init draws from the global CPU generator, and the VQVAE keeps it:
    // seeded from `seed` for these constructions only (then put back), so that one --init-seed
    // gives one model in every process (the VQVAE, and so every token after the first scale,
    // differed from run to run).
    auto gen = at::detail::getDefaultCPUGenerator();
    const at::Tensor saved = gen.get_state();
    gen.set_current_seed(seed ^ 0x5eedf00du);
    VarTransformer var(vc);
    Vqvae vae(ac);
    gen.set_state(saved);
    var->init_weights(seed);  // its own generator
    return VarPipeline(placed_sampler(var, vae, o));
}

VarSampleResult VarPipeline::generate(const VarSampleOptions& opt, SamplingHooks* hooks,
                                      ProbeSink* probe) {
    return sampler_->sample(opt, hooks, probe);
}

at::Device VarPipeline::device() const {
    return sampler_->transformer()->pos_1LC.device();
}

int64_t count_parameters(const torch::nn::Module& m) {
    int64_t n = 0;
    for (const auto& p : m.parameters()) n += p.numel();
    return n;
}

std::string VarPipeline::describe() const {
    const auto& v = var_config();
    const auto& a = vae_config();
    std::ostringstream os;
    os << "VAR d" << v.depth << ": width " << v.embed_dim << ", " << v.num_heads << " heads, "
       << v.num_classes << " classes, vocab " << v.vocab_size << ", " << v.num_scales()
       << " scales up to " << v.patch_nums.back() << "x" << v.patch_nums.back() << ", "
       << count_parameters(*sampler_->transformer()) / 1e6 << "M params"
       << (v.shared_aln ? ", shared AdaLN" : "") << "\n"
       << "VQVAE: ch " << a.ch << ", z " << a.z_channels << ", vocab " << a.vocab_size
       << ", downsample " << a.downsample() << ", " << count_parameters(*sampler_->vqvae()) / 1e6
       << "M params";
    return os.str();
}

}  // namespace varscope
