// Where VARScope's shipped files live, and the bundled emoji model (no download needed).
#pragma once

#include <string>

#include "core/mar_pipeline.h"
#include "core/pipeline.h"

namespace varscope {

// Where the shipped files are: the override if set (the programs pass $VARSCOPE_RESOURCES,
// app/exec_env); else share/varscope beside the running executable's bin/ (an installed copy,
// `cmake --install`); else the resources/ folder this build was configured from (a build tree).
std::string resource_dir();
// Sets resource_dir()'s override ("" = none). For a program's main, before other threads start:
// core reads no environment variables.
void set_resource_dir_override(const std::string& dir);
// resource_dir()'s rule with its inputs given (env: the override or nullptr; exe: the
// executable's path, "" if unknown; configured: the build's resources/ folder).
std::string resolve_resource_dir(const char* env, const std::string& exe,
                                 const std::string& configured);
// resources/models/emoji-{var,vqvae}.safetensors; throws CheckpointError if they are missing.
VarModelFiles embedded_model_files();
bool embedded_model_available();
// resources/models/emoji-{mar,klvae}.safetensors (the embedded MAR and its KL VAE), with the
// diffusion respacing the MAR file recommends; throws CheckpointError if they are missing.
MarModelFiles embedded_mar_files();
bool embedded_mar_available();
// The embedded text-to-image model (issue #33): an Infinity transformer, its BSQ VAE and the T5
// encoder folder (config.json, model.safetensors, spiece.model) that reads the prompts.
struct T2iModelFiles {
    std::string model_path;         // resources/models/emoji-t2i-infinity.safetensors
    std::string vae_path;           // resources/models/emoji-t2i-bsq-vae.safetensors
    std::string text_encoder_path;  // resources/models/emoji-t2i-t5/
};
// Throws CheckpointError naming the first missing file.
T2iModelFiles embedded_t2i_files();
bool embedded_t2i_available();
// The class-name list that belongs to a VAR checkpoint: "<var>-classes.json" or
// "emoji-classes.json" beside it, else the ImageNet list for 1000-class models; "" if none.
std::string class_list_for(const std::string& var_path, int64_t num_classes);

}  // namespace varscope
