// Reading and writing checkpoint files: PyTorch .pth (zip + pickle, data only) and .safetensors.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/io/state_dict.h"

namespace varscope {

// Loads every tensor of a checkpoint, picking the reader from the file's contents (a zip archive
// is a torch.save file, anything else must be safetensors). Nested dictionaries are flattened
// with '.' (a MAR checkpoint {"model_ema": {...}} gives "model_ema.<name>"). Never runs code from
// the file: pickled classes outside a fixed allow-list of tensor rebuild functions are refused.
StateDict load_checkpoint(const std::string& path);

StateDict load_pth(const std::string& path);
StateDict load_safetensors(const std::string& path);
// The tensors as stored (an int8 file's weights and scales not expanded) and the metadata: for
// tools that rewrite a file (varscope-cli shard), never for a model.
StateDict load_safetensors_stored(const std::string& path,
                                  std::map<std::string, std::string>* metadata);
// Only the tensors whose names `keep` accepts; the others are not read (e.g. a full T5's
// decoder beside the encoder that is wanted).
StateDict load_safetensors_selected(const std::string& path,
                                    const std::function<bool(const std::string&)>& keep);

// The "__metadata__" string map of a safetensors file (empty when it has none); of a shard
// index, its "metadata" object's string values.
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);
// The tensor names of a safetensors file, from its header only.
std::vector<std::string> read_safetensors_names(const std::string& path);

// Sharded safetensors, the Hugging Face layout: "<stem>.safetensors.index.json" holds
// {"metadata": {...}, "weight_map": {tensor: shard file name}}, the shards lie beside it. Files
// are capped in size where this project ships them (16 MiB), so a larger model is split.
bool is_safetensors_index(const std::string& path);  // the name ends with ".safetensors.index.json"
// Every tensor (or those `keep` accepts; a shard with none of them is not opened), each shard
// read as load_safetensors does (int8 weights expanded). Throws CheckpointError naming the index
// or the shard: unreadable JSON, no weight_map, a shard name that is not a plain file name, a
// shard that lacks a tensor the index places there or holds one it does not list.
StateDict load_safetensors_index(const std::string& index_path,
                                 const std::function<bool(const std::string&)>& keep = nullptr);
std::map<std::string, std::string> read_safetensors_index_metadata(const std::string& index_path);
// `tensors` as one file at `path` (ending in .safetensors) when they take at most
// `max_file_bytes`, otherwise as shards "<stem>-0000i-of-0000n.safetensors" of at most that size
// each (a tensor larger than it gets a shard of its own) and "<path>.index.json"; every shard
// carries `metadata`, so each reads alone. A tensor named "<x>.<suffix>" stays in the shard of
// "<x>" (an int8 weight's ".qscale"). Returns the path to open: `path` or the index; the other
// of the two is removed if it exists (shards of an older index are left).
std::string save_safetensors_sharded(const StateDict& tensors, const std::string& path,
                                     const std::map<std::string, std::string>& metadata,
                                     uint64_t max_file_bytes);

// Writes contiguous CPU copies of the tensors; metadata lands in the "__metadata__" header.
void save_safetensors(const StateDict& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {});

// Returns the sub-dictionary under `prefix.` with the prefix removed (empty prefix = all).
StateDict select_prefix(const StateDict& all, const std::string& prefix);

}  // namespace varscope
