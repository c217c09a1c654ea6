// `kvtier size`: the sizing engine on a config.json, a catalog model, or the whole catalog.
#include <iostream>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "kvtier/capacity_plan.h"
#include "kvtier/model_catalog.h"
#include "kvtier/sizing.h"
#include "kvtier/sizing_report.h"

namespace kvtier::cli {
namespace {

struct SizeArgs {
  std::string model;
  std::string config_path;
  bool list = false;
  bool all = false;
  bool json = false;
  SizingOptions sizing;
  double gpu_mem_gib = 0;
  double gpu_util = 0.9;
  int64_t context = 0;
  double activation_gib = -1;
  std::string weight_dtype;
  int64_t max_batched_tokens = 8192;
  int64_t max_num_seqs = 0;
  std::string tiers_path;
};

Result<SizingReport> SizeOne(const ModelSpec& model, const SizeArgs& args,
                             const std::vector<TierCapacity>& tiers) {
  SizingReport report;
  report.model = model;
  KVTIER_ASSIGN_OR_RETURN(report.kv, ComputeKvSizing(model, args.sizing));
  const bool wants_gpu_plan = args.gpu_mem_gib > 0 || args.context > 0;
  if (wants_gpu_plan) {
    GpuMemoryOptions options;
    options.gpu_mem_gib = args.gpu_mem_gib;
    options.gpu_util = args.gpu_util;
    options.context = args.context;
    if (args.activation_gib >= 0) options.activation_reserve_gib = args.activation_gib;
    if (!args.weight_dtype.empty()) options.weight_dtype = args.weight_dtype;
    options.max_batched_tokens = args.max_batched_tokens;
    options.max_num_seqs = args.max_num_seqs;
    if (args.gpu_mem_gib > 0 && args.context > 0) {
      KVTIER_ASSIGN_OR_RETURN(report.gpu, PlanGpuMemory(model, report.kv, options));
      report.gpu_options = options;
    } else if (args.gpu_mem_gib > 0) {
      return Status::InvalidArgument("--gpu-mem-gib needs --context (tokens per sequence) to plan a batch");
    }
  }
  report.tiers = FitTiers(report.kv, tiers, args.context, args.max_batched_tokens);
  return report;
}

// Range checks on options the library would otherwise silently ignore when unused.
Status ValidateArgs(const SizeArgs& args) {
  if (!(args.gpu_mem_gib >= 0)) return Status::InvalidArgument("--gpu-mem-gib must be a positive number of GiB");
  if (args.context < 0) return Status::InvalidArgument("--context must be a positive number of tokens");
  if (args.max_batched_tokens < 1) return Status::InvalidArgument("--max-batched-tokens must be >= 1");
  if (args.max_num_seqs < 0) return Status::InvalidArgument("--max-num-seqs must be >= 0");
  return args.sizing.Validate();
}

Status RunSize(const SizeArgs& args) {
  KVTIER_RETURN_IF_ERROR(ValidateArgs(args));
  if (args.list) {
    for (const CatalogEntry& entry : ListCatalog()) std::cout << entry.name << "\t" << entry.file << "\n";
    return Status::Ok();
  }
  std::vector<TierCapacity> tiers;
  if (!args.tiers_path.empty()) {
    KVTIER_ASSIGN_OR_RETURN(tiers, LoadTierCapacities(args.tiers_path));
  }

  std::vector<ModelSpec> models;
  if (args.all) {
    for (const CatalogEntry& entry : ListCatalog()) {
      KVTIER_ASSIGN_OR_RETURN(ModelSpec model, LoadCatalogModel(entry.name));
      models.push_back(std::move(model));
    }
  } else if (!args.config_path.empty()) {
    KVTIER_ASSIGN_OR_RETURN(ModelSpec model, LoadModelConfig(args.config_path));
    models.push_back(std::move(model));
  } else if (!args.model.empty()) {
    KVTIER_ASSIGN_OR_RETURN(ModelSpec model, LoadCatalogModel(args.model));
    models.push_back(std::move(model));
  } else {
    return Status::InvalidArgument("name a catalog model (kvtier size --list), or pass --config PATH or --all");
  }

  std::vector<SizingReport> reports;
  for (const ModelSpec& model : models) {
    KVTIER_ASSIGN_OR_RETURN(SizingReport report, SizeOne(model, args, tiers));
    reports.push_back(std::move(report));
  }
  if (args.all) {
    std::cout << (args.json ? SizingSummaryJson(reports) : SizingSummaryTable(reports));
  } else {
    std::cout << (args.json ? SizingReportJson(reports.front()) : SizingReportTable(reports.front()));
  }
  return Status::Ok();
}

}  // namespace

void AddSizeCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<SizeArgs>();
  CLI::App* size = app.add_subcommand("size", "Size the KV cache of a model from its config.json");
  size->add_option("model", args->model, "Catalog model name (see --list)");
  size->add_option("--config", args->config_path, "Path to a Hugging Face config.json");
  size->add_flag("--list", args->list, "List the built-in model catalog");
  size->add_flag("--all", args->all, "Size every catalog model (the summary table)");
  size->add_flag("--json", args->json, "Print JSON instead of a table");
  size->add_option("--kv-dtype", args->sizing.kv_dtype,
                   "KV storage: auto (model dtype), bf16, fp16, fp32, fp8, int8, int4, nvfp4")
      ->capture_default_str();
  size->add_option("--kv-quant-group", args->sizing.kv_quant_group, "Elements per scale for int4/nvfp4 (0: format default)");
  size->add_option("--state-dtype", args->sizing.state_dtype, "SSM state dtype of linear-attention layers")
      ->capture_default_str();
  size->add_option("--tp", args->sizing.parallel.tensor_parallel, "Tensor-parallel size")->capture_default_str();
  size->add_option("--pp", args->sizing.parallel.pipeline_parallel, "Pipeline-parallel size")->capture_default_str();
  size->add_option("--block-size", args->sizing.block_size, "Tokens per KV block")->capture_default_str();
  size->add_option("--gpu-mem-gib", args->gpu_mem_gib, "Memory of one GPU in GiB (plans max_tokens / max_batch)");
  size->add_option("--gpu-util", args->gpu_util, "Fraction of GPU memory kvtier may plan with")->capture_default_str();
  size->add_option("--context", args->context, "Tokens per sequence for the batch plan");
  size->add_option("--activation-gib", args->activation_gib, "Activation reserve per GPU in GiB (default: estimated)");
  size->add_option("--weight-dtype", args->weight_dtype, "Weight storage override: bf16, fp16, fp32, fp8, int8, int4");
  size->add_option("--max-batched-tokens", args->max_batched_tokens, "Tokens per prefill chunk")->capture_default_str();
  size->add_option("--max-num-seqs", args->max_num_seqs, "Cap on the batch (0: none)");
  size->add_option("--tiers", args->tiers_path, "YAML file naming tiers and capacities");
  size->callback([args, &exit_code]() {
    Status status = RunSize(*args);
    if (!status.ok()) {
      std::cerr << "kvtier size: error: " << status.message() << "\n";
      exit_code = kExitError;
    }
  });
}

}  // namespace kvtier::cli
