// Reading and writing checkpoint files: PyTorch .pth (zip + pickle, data only) and .safetensors.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "core/io/state_dict.h"

namespace varscope {

// Loads every tensor of a checkpoint, picking the reader from the file's contents (a zip archive
// is a torch.save file, anything else must be safetensors). Nested dictionaries are flattened
// with '.' (a MAR checkpoint {"model_ema": {...}} gives "model_ema.<name>"). Never runs code from
// the file: pickled classes outside a fixed allow-list of tensor rebuild functions are refused.
StateDict load_checkpoint(const std::string& path);

StateDict load_pth(const std::string& path);
StateDict load_safetensors(const std::string& path);
// Only the tensors whose names `keep` accepts; the others are not read (e.g. a full T5's
// decoder beside the encoder that is wanted).
StateDict load_safetensors_selected(const std::string& path,
                                    const std::function<bool(const std::string&)>& keep);

// The "__metadata__" string map of a safetensors file (empty when it has none).
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);

// Writes contiguous CPU copies of the tensors; metadata lands in the "__metadata__" header.
void save_safetensors(const StateDict& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {});

// Returns the sub-dictionary under `prefix.` with the prefix removed (empty prefix = all).
StateDict select_prefix(const StateDict& all, const std::string& prefix);

}  // namespace varscope
