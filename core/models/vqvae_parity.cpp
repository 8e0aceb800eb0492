#include "core/models/vqvae_parity.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

namespace varscope {
namespace {

const at::Tensor& required(const StateDict& ref, const std::string& key) {
    auto it = ref.find(key);
    if (it == ref.end()) throw CheckpointError("VQVAE parity reference lacks tensor '" + key + "'");
    return it->second;
}

ParityEntry compare(const std::string& name, const at::Tensor& ours, const at::Tensor& ref) {
    ParityEntry e;
    e.name = name;
    const at::Tensor a = ours.detach().to(at::kCPU);
    const at::Tensor b = ref.detach().to(at::kCPU);
    if (a.sizes() != b.sizes())
        throw CheckpointError("VQVAE parity: '" + name + "' has shape " + c10::str(a.sizes()) +
                              " here but " + c10::str(b.sizes()) + " in the reference");
    e.count = a.numel();
    if (!a.is_floating_point()) {
        e.integer = true;
        e.mismatches = a.ne(b.to(a.scalar_type())).sum().item<int64_t>();
        return e;
    }
    const at::Tensor a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
    if (e.count > 0) {
        e.max_abs_err = (a64 - b64).abs().max().item<double>();
        e.ref_max_abs = b64.abs().max().item<double>();
    }
    return e;
}

}  // namespace

double VqvaeParityReport::worst_rel_err() const {
    double worst = 0.0;
    for (const auto& e : entries) worst = std::max(worst, e.rel_err());
    return worst;
}

int64_t VqvaeParityReport::index_mismatches() const {
    int64_t n = 0;
    for (const auto& e : entries) n += e.mismatches;
    return n;
}

std::string VqvaeParityReport::summary() const {
    std::ostringstream os;
    for (const auto& e : entries) {
        os << std::left << std::setw(12) << e.name << " n=" << e.count;
        if (!e.integer)
            os << std::scientific << std::setprecision(3) << "  max_abs=" << e.max_abs_err
               << "  rel=" << e.rel_err() << std::defaultfloat;
        else
            os << "  mismatches=" << e.mismatches;
        os << '\n';
    }
    return os.str();
}

VqvaeParityReport vqvae_parity(Vqvae& model, const StateDict& reference) {
    at::NoGradGuard no_grad;
    const auto params = model->parameters();
    const c10::Device device = params.empty() ? c10::Device(at::kCPU) : params.front().device();
    auto in = [&](const std::string& key) { return required(reference, key).to(device); };
    const int64_t SN = static_cast<int64_t>(model->config().patch_nums.size());

    VqvaeParityReport report;
    report.entries.push_back(compare("f", model->encode(in("inp")), required(reference, "f")));

    const at::Tensor f = in("f");
    const std::vector<at::Tensor> idx = model->f_to_idx(f);
    std::vector<at::Tensor> ref_idx;
    for (int64_t si = 0; si < SN; ++si) {
        const std::string key = "idx." + std::to_string(si);
        report.entries.push_back(compare(key, idx[si], required(reference, key)));
        ref_idx.push_back(in(key).to(at::kLong));
    }
    if (reference.count("fhat.0")) {
        const std::vector<at::Tensor> fhats = model->f_to_fhats(f);
        for (int64_t si = 0; si < SN; ++si) {
            const std::string key = "fhat." + std::to_string(si);
            report.entries.push_back(compare(key, fhats[si], required(reference, key)));
        }
    }
    if (reference.count("rec")) {
        const at::Tensor fhat_last = in("fhat." + std::to_string(SN - 1));
        report.entries.push_back(compare("rec", model->decode(fhat_last), reference.at("rec")));
    }
    if (reference.count("idx_rec"))
        report.entries.push_back(
            compare("idx_rec", model->idx_to_img(ref_idx), reference.at("idx_rec")));
    if (reference.count("var_input"))
        report.entries.push_back(
            compare("var_input", model->idx_to_var_input(ref_idx), reference.at("var_input")));
    return report;
}

}  // namespace varscope
