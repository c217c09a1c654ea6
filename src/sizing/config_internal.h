// Private pieces of config.json reading, shared by the files of src/sizing/.
#pragma once

#include <vector>

#include "kvtier/model_spec.h"
#include "util/json_document.h"

namespace kvtier::sizing_internal {

// The decoder-layer pattern: which layers attend fully, through a window, keep a
// recurrent state, or keep nothing. Adds to `notes` what it inferred.
Result<std::vector<LayerSpec>> ReadLayerPattern(const JsonFields& config, const ModelSpec& partial,
                                                std::vector<std::string>& notes);

// The recurrent-state geometry of hybrid / SSM models, or nullopt for pure attention.
Result<std::optional<LinearStateGeometry>> ReadLinearState(const JsonFields& config,
                                                           const ModelSpec& partial);

// Parameter counts by role for a model whose spec is otherwise complete.
Result<ParameterCount> CountParameters(const JsonFields& config, const ModelSpec& spec);

// The checkpoint's weight storage format from quantization_config.
Result<WeightFormat> ReadWeightFormat(const JsonFields& config, const ModelSpec& spec);

// Bits per element of "bfloat16"/"float16"/"float32".
double DtypeBits(std::string_view dtype);

}  // namespace kvtier::sizing_internal
