// Compares our VQVAE stage by stage with tensors that the official PyTorch code produced from
// the same weights, e.g. on a GPU machine with the released checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/io/state_dict.h"
#include "core/models/vqvae.h"

namespace varscope {

struct ParityEntry {
    std::string name;
    int64_t count = 0;         // elements compared
    double max_abs_err = 0.0;  // max |ours - ref|
    double ref_max_abs = 0.0;  // max |ref|
    bool integer = false;      // token indices: compared for equality
    int64_t mismatches = 0;    // integer tensors: elements that differ
    // max_abs_err relative to the reference's scale (element-wise ratios blow up near zero).
    double rel_err() const { return ref_max_abs > 0 ? max_abs_err / ref_max_abs : max_abs_err; }
};

struct VqvaeParityReport {
    std::vector<ParityEntry> entries;
    double worst_rel_err() const;      // over float entries
    int64_t index_mismatches() const;  // over integer entries
    std::string summary() const;       // one line per entry
};

// Reference keys (float32 unless noted; [B,3,H,W] images in [-1, 1]):
//   "inp"        the input image
//   "f"          quant_conv(encoder(inp))
//   "idx.<si>"   f_to_idxBl_or_fhat(f, to_fhat=False)[si], int64 [B, pn*pn], every scale
//   "fhat.<si>"  f_to_idxBl_or_fhat(f, to_fhat=True)[si]                      (optional)
//   "rec"        fhat_to_img(fhat.<SN-1>)                                      (optional)
//   "idx_rec"    idxBl_to_img([idx.*], same_shape=True, last_one=True)          (optional)
//   "var_input"  idxBl_to_var_input([idx.*])                                   (optional)
// Every stage starts from the reference's own input (f from inp, idx/fhat from f, rec from
// fhat.<SN-1>, ...), so one stage's error does not leak into the next. Runs without autograd
// on the model's device; reference tensors may live anywhere. Throws CheckpointError when a
// required key is absent.
VqvaeParityReport vqvae_parity(Vqvae& model, const StateDict& reference);

}  // namespace varscope
