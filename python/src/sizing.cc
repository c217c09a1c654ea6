// The sizing engine: load_model (a catalog name or a config.json path, as `kvtier size` and
// `kvtier size --config` load them) and kv_sizing (ComputeKvSizing with its options).
#include "kvtier/sizing.h"

#include <filesystem>
#include <string>

#include "bindings.h"
#include "kvtier/model_catalog.h"
#include "kvtier/model_spec.h"

namespace kvtier::python {
namespace {

py::dict ParametersDict(const ParameterCount& p) {
  py::dict d;
  d["total"] = p.total;
  d["active_per_token"] = p.active_per_token;
  d["embedding"] = p.embedding;
  d["lm_head"] = p.lm_head;
  d["attention"] = p.attention;
  d["linear_attention"] = p.linear_attention;
  d["dense_mlp"] = p.dense_mlp;
  d["experts"] = p.experts;
  d["shared_and_router"] = p.shared_and_router;
  d["norms"] = p.norms;
  return d;
}

py::object LinearStateDict(const std::optional<LinearStateGeometry>& s) {
  if (!s.has_value()) return py::none();
  py::dict d;
  d["kind"] = std::string(StateKindName(s->kind));
  d["conv_kernel"] = s->conv_kernel;
  d["num_k_heads"] = s->num_k_heads;
  d["num_v_heads"] = s->num_v_heads;
  d["head_k_dim"] = s->head_k_dim;
  d["head_v_dim"] = s->head_v_dim;
  d["intermediate_size"] = s->intermediate_size;
  d["state_size"] = s->state_size;
  d["num_heads"] = s->num_heads;
  d["head_dim"] = s->head_dim;
  d["n_groups"] = s->n_groups;
  return d;
}

py::dict KvDtypeDict(const KvDtype& t) {
  py::dict d;
  d["name"] = t.name;
  d["bits"] = t.bits;
  d["group_size"] = t.group_size;
  d["scale_bytes"] = t.scale_bytes;
  return d;
}

// A catalog name, or a path to a config.json (anything that names an existing file, or ends
// in .json).
ModelSpec LoadModel(const std::string& name_or_path) {
  std::error_code ec;
  const bool is_file = std::filesystem::is_regular_file(name_or_path, ec);
  if (is_file || name_or_path.ends_with(".json") || name_or_path.find('/') != std::string::npos) {
    return ValueOrThrow(LoadModelConfig(name_or_path));
  }
  return ValueOrThrow(LoadCatalogModel(name_or_path));
}

}  // namespace

void BindSizing(py::module_& m) {
  py::class_<AttentionGeometry>(m, "AttentionGeometry", "The geometry shared by a model's attention layers.")
      .def_property_readonly("kind", [](const AttentionGeometry& a) { return std::string(AttentionKindName(a.kind)); })
      .def_readonly("num_q_heads", &AttentionGeometry::num_q_heads)
      .def_readonly("num_kv_heads", &AttentionGeometry::num_kv_heads)
      .def_readonly("head_dim_k", &AttentionGeometry::head_dim_k)
      .def_readonly("head_dim_v", &AttentionGeometry::head_dim_v)
      .def_readonly("naive_head_dim", &AttentionGeometry::naive_head_dim)
      .def_readonly("kv_lora_rank", &AttentionGeometry::kv_lora_rank)
      .def_readonly("qk_rope_head_dim", &AttentionGeometry::qk_rope_head_dim)
      .def("__repr__", [](const AttentionGeometry& a) {
        return "AttentionGeometry(kind=" + std::string(AttentionKindName(a.kind)) +
               ", num_q_heads=" + std::to_string(a.num_q_heads) + ", num_kv_heads=" + std::to_string(a.num_kv_heads) +
               ", head_dim_k=" + std::to_string(a.head_dim_k) + ")";
      });

  py::class_<ModelSpec>(m, "ModelSpec", "A model's architecture, read from a Hugging Face config.json.")
      .def_readonly("name", &ModelSpec::name)
      .def_readonly("source", &ModelSpec::source)
      .def_readonly("model_type", &ModelSpec::model_type)
      .def_readonly("architecture", &ModelSpec::architecture)
      .def_readonly("dtype", &ModelSpec::dtype)
      .def_readonly("num_layers", &ModelSpec::num_layers)
      .def_readonly("hidden_size", &ModelSpec::hidden_size)
      .def_readonly("vocab_size", &ModelSpec::vocab_size)
      .def_readonly("max_position_embeddings", &ModelSpec::max_position_embeddings)
      .def_readonly("intermediate_size", &ModelSpec::intermediate_size)
      .def_readonly("mtp_layers", &ModelSpec::mtp_layers)
      .def_readonly("attention", &ModelSpec::attention)
      .def_property_readonly("linear_state", [](const ModelSpec& s) { return LinearStateDict(s.linear_state); })
      .def_property_readonly(
          "state_dtype",
          [](const ModelSpec& s) -> py::object { return s.state_dtype ? py::cast(*s.state_dtype) : py::none(); })
      .def_property_readonly("layers",
                             [](const ModelSpec& s) {
                               py::list out;
                               for (const LayerSpec& l : s.layers)
                                 out.append(py::make_tuple(std::string(LayerMixerName(l.mixer)), l.window));
                               return out;
                             })
      .def_property_readonly("parameters", [](const ModelSpec& s) { return ParametersDict(s.parameters); })
      .def_property_readonly("weight_format", [](const ModelSpec& s) { return s.weights.name; })
      .def_readonly("notes", &ModelSpec::notes)
      .def(
          "count_layers",
          [](const ModelSpec& s, const std::string& mixer) {
            for (LayerMixer k : {LayerMixer::kFullAttention, LayerMixer::kSlidingAttention,
                                 LayerMixer::kLinearAttention, LayerMixer::kNoKv}) {
              if (LayerMixerName(k) == mixer) return s.CountLayers(k);
            }
            ThrowStatus(Status::InvalidArgument(
                "mixer '" + mixer + "' is not full_attention, sliding_attention, linear_attention or no_kv"));
          },
          py::arg("mixer"), "Decoder layers of one kind: full_attention, sliding_attention, linear_attention, no_kv.")
      .def("__repr__", [](const ModelSpec& s) {
        return "ModelSpec(name='" + s.name + "', model_type='" + s.model_type +
               "', num_layers=" + std::to_string(s.num_layers) + ")";
      });

  py::class_<KvSizing>(m, "KvSizing", "KV-cache bytes per token and per block on one GPU (ComputeKvSizing).")
      .def_property_readonly("kv_dtype", [](const KvSizing& k) { return KvDtypeDict(k.kv_dtype); })
      .def_property_readonly("state_dtype", [](const KvSizing& k) { return KvDtypeDict(k.state_dtype); })
      .def_property_readonly("tensor_parallel", [](const KvSizing& k) { return k.parallel.tensor_parallel; })
      .def_property_readonly("pipeline_parallel", [](const KvSizing& k) { return k.parallel.pipeline_parallel; })
      .def_readonly("block_size", &KvSizing::block_size)
      .def_readonly("kv_heads_per_gpu", &KvSizing::kv_heads_per_gpu)
      .def_readonly("layers_per_gpu", &KvSizing::layers_per_gpu)
      .def_readonly("pipeline_stage", &KvSizing::pipeline_stage)
      .def_property_readonly("groups",
                             [](const KvSizing& k) {
                               py::list out;
                               for (const LayerGroupSizing& g : k.groups) {
                                 py::dict d;
                                 d["mixer"] = std::string(LayerMixerName(g.mixer));
                                 d["layers"] = g.layers;
                                 d["window"] = g.window;
                                 d["kv_bytes_per_token_per_layer"] = g.kv_bytes_per_token_per_layer;
                                 d["state_bytes_per_sequence_per_layer"] = g.state_bytes_per_sequence_per_layer;
                                 out.append(d);
                               }
                               return out;
                             })
      .def_readonly("kv_bytes_per_token", &KvSizing::kv_bytes_per_token)
      .def_readonly("kv_bytes_per_token_per_layer", &KvSizing::kv_bytes_per_token_per_layer)
      .def_readonly("naive_mha_bytes_per_token_per_layer", &KvSizing::naive_mha_bytes_per_token_per_layer)
      .def_readonly("overprovision_ratio", &KvSizing::overprovision_ratio)
      .def_readonly("state_bytes_per_sequence", &KvSizing::state_bytes_per_sequence)
      .def_readonly("kv_bytes_per_block", &KvSizing::kv_bytes_per_block)
      .def_readonly("kv_bytes_per_token_all_gpus", &KvSizing::kv_bytes_per_token_all_gpus)
      .def(
          "bytes_per_sequence",
          [](const KvSizing& k, int64_t context, int64_t max_batched_tokens) {
            if (context < 0 || max_batched_tokens < 0) {
              ThrowStatus(Status::InvalidArgument("context and max_batched_tokens must be non-negative"));
            }
            return k.BytesPerSequence(context, max_batched_tokens);
          },
          py::arg("context"), py::arg("max_batched_tokens") = 8192,
          "Bytes one sequence of `context` tokens holds on this GPU, as vLLM allocates it.")
      .def("__repr__", [](const KvSizing& k) {
        return "KvSizing(kv_dtype='" + k.kv_dtype.name + "', block_size=" + std::to_string(k.block_size) +
               ", kv_bytes_per_token=" + std::to_string(k.kv_bytes_per_token) +
               ", kv_bytes_per_block=" + std::to_string(k.kv_bytes_per_block) + ")";
      });

  m.def("load_model", &LoadModel, py::arg("name_or_path"),
        "A catalog model by name (kvtier size --list), or a Hugging Face config.json by path.");
  m.def(
      "catalog",
      [] {
        py::list out;
        for (const CatalogEntry& e : ListCatalog()) out.append(e.name);
        return out;
      },
      "Names of the built-in catalog's models.");
  m.def(
      "kv_sizing",
      [](const ModelSpec& model, int64_t block_size, const std::string& kv_dtype, int64_t tp, int64_t pp,
         int64_t kv_quant_group, const std::string& state_dtype) {
        SizingOptions options{.kv_dtype = kv_dtype,
                              .kv_quant_group = kv_quant_group,
                              .state_dtype = state_dtype,
                              .parallel = {.tensor_parallel = tp, .pipeline_parallel = pp},
                              .block_size = block_size};
        ThrowIfError(options.Validate());
        return ValueOrThrow(ComputeKvSizing(model, options));
      },
      py::arg("model"), py::arg("block_size") = 16, py::arg("kv_dtype") = "auto", py::arg("tp") = 1, py::arg("pp") = 1,
      py::arg("kv_quant_group") = 0, py::arg("state_dtype") = "auto",
      "KV bytes per token and per block on one GPU (the options of `kvtier size`).");
}

}  // namespace kvtier::python
