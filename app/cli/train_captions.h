// Captions per packed image row for `train infinity`, read through this one function so the
// captions module of issue #33 (core/data/emoji_captions.h) replaces it in one place.
#pragma once

#include <string>
#include <vector>

namespace varscope::cli {

// Stand-in until the captions module is merged: per row of the packed data (its "labels" and,
// if present, "styles" tensors) "<class name>, <style> style" and "<short name>, <style> style",
// lower case, from the class list (pack-emoji's emoji-classes.json). std::invalid_argument
// naming the file when a label has no class or the tensors are missing.
std::vector<std::vector<std::string>> load_row_captions(const std::string& data_path,
                                                        const std::string& classes_path);

}  // namespace varscope::cli
