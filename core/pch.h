// Precompiled header for every translation unit that touches LibTorch. Parsing these headers is
// most of a TU's compile time (~50 s each without a PCH), so they are parsed once per target.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>
