// Growing a trained transformer to more blocks (VAR, Infinity): the small model's block i becomes
// block floor(i * D / d) of the deeper one; the blocks in between keep the deeper model's own
// initialisation but with the output projections of their residual branches zeroed, so they add
// nothing and the grown model first computes exactly what the small one did. Training then
// starts from the small model's function instead of from scratch.
#pragma once

#include <string>
#include <vector>

#include "core/io/state_dict.h"

namespace varscope {

struct GrowSpec {
    std::string block_marker;         // a tensor every block has, e.g. "attn.mat_qkv.weight"
    std::vector<std::string> zeroed;  // each new block's branch outputs, e.g. "ffn.fc2.weight"
};

// The deeper model's state dict: `own` (the deeper model's tensors as initialised, names
// "blocks.<j>.<rest>" for its `depth` blocks) with `small`'s blocks moved in and its other tensors
// taken as they are. Sets *small_depth to d. Throws std::invalid_argument naming `what` when
// `small` has no blocks, more than `depth`, or gaps in its numbering.
StateDict grown_state_dict(const StateDict& own, int64_t depth, const StateDict& small,
                           const GrowSpec& spec, const std::string& what,
                           int64_t* small_depth = nullptr);

// The specs of our two block families (core/models/var.cpp, infinity_blocks.cpp): each branch
// (VAR: attention, FFN; Infinity: self-attention, cross-attention, FFN) ends in a projection.
const GrowSpec& var_grow_spec();
const GrowSpec& infinity_grow_spec();

// Blocks of a state dict: how many "blocks.<i>.<marker>" there are, counting from 0.
int64_t count_blocks(const StateDict& dict, const std::string& marker);

}  // namespace varscope
