// kvtier.Store: a TieredStore in this process (store.h), its tiers from a tier configuration
// (tier_config.h) or the embedded default. Payloads are Python buffers used in place.
#include "kvtier/store.h"

#include <limits>
#include <memory>
#include <string>

#include "bindings.h"
#include "kvtier/tier_config.h"
#include "store_stats.h"

namespace kvtier::python {
namespace {

// A store; calls in flight share it (ClosableHandle), so close() waits for none of them.
class PyStore : public ClosableHandle<TieredStore> {
 public:
  explicit PyStore(std::shared_ptr<TieredStore> store) : ClosableHandle(std::move(store), "the store") {}
};

// Unpins its blocks when released, collected or its `with` block ends.
class PyStorePin {
 public:
  PyStorePin(std::shared_ptr<TieredStore> store, StorePin pin) : store_(std::move(store)), pin_(std::move(pin)) {}
  std::size_t size() const { return pin_.size(); }
  void Release() { pin_.Release(); }

 private:
  std::shared_ptr<TieredStore> store_;  // outlives pin_ (members are destroyed in reverse)
  StorePin pin_;
};

std::unique_ptr<PyStore> OpenStore(py::object tier_config, const std::string& policy, py::object data_dir,
                                   py::object tier_config_text, int mover_threads, bool synchronous_moves,
                                   bool prefetch, bool promote_on_read, double high_watermark, double low_watermark) {
  const bool use_default =
      tier_config_text.is_none() && (tier_config.is_none() || py::str(tier_config).cast<std::string>() == "default");
  if (!data_dir.is_none() && !use_default) {
    ThrowStatus(
        Status::InvalidArgument("data_dir applies to the default tier configuration only; a configuration "
                                "names its own data_dir"));
  }
  if (!tier_config_text.is_none() && !tier_config.is_none()) {
    ThrowStatus(Status::InvalidArgument("pass tier_config (a path) or tier_config_text, not both"));
  }
  TierConfig config;
  if (use_default) {
    config = DefaultTierConfig(data_dir.is_none() ? std::string("kvtier-data") : py::str(data_dir).cast<std::string>());
  } else if (!tier_config_text.is_none()) {
    config = ValueOrThrow(ParseTierConfig(tier_config_text.cast<std::string>(), "tier_config_text"));
  } else {
    config = ValueOrThrow(LoadTierConfig(py::str(tier_config).cast<std::string>()));
  }
  StoreOptions options;
  options.policy = ValueOrThrow(ParsePolicyKind(policy));
  options.mover_threads = mover_threads;
  options.synchronous_moves = synchronous_moves;
  options.prefetch = prefetch;
  options.promote_on_read = promote_on_read;
  options.high_watermark = high_watermark;
  options.low_watermark = low_watermark;
  Result<std::unique_ptr<TieredStore>> store = [&]() -> Result<std::unique_ptr<TieredStore>> {
    py::gil_scoped_release release;
    KVTIER_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Tier>> tiers, OpenTiers(config));
    return TieredStore::Open(std::move(tiers), std::move(options));
  }();
  return std::make_unique<PyStore>(std::shared_ptr<TieredStore>(ValueOrThrow(std::move(store))));
}

PutResult Put(PyStore& self, py::handle keys, py::handle payloads, py::handle parent, py::handle tokens,
              py::handle block_type, py::handle transition, double recompute_seconds) {
  std::vector<BlockKey> ks = KeysFromPython(keys);
  HeldBuffers buffers(payloads, /*writable=*/false, "payloads");
  if (buffers.size() != ks.size()) {
    ThrowStatus(Status::InvalidArgument("put: " + std::to_string(ks.size()) + " keys but " +
                                        std::to_string(buffers.size()) + " payloads"));
  }
  std::vector<uint32_t> token_counts = PerBlockTokens(tokens, ks.size());
  std::vector<BlockType> types = PerBlockTypes(block_type, ks.size());
  std::vector<TransitionType> transitions = PerBlockTransitions(transition, ks.size());
  std::optional<BlockKey> parent_key = OptionalKeyFromPython(parent);
  std::vector<BlockPut> blocks(ks.size());
  for (std::size_t i = 0; i < ks.size(); ++i) {
    if (buffers[i].size() > std::numeric_limits<uint32_t>::max()) {
      ThrowStatus(Status::InvalidArgument("payloads[" + std::to_string(i) + "] is over 4 GiB"));
    }
    blocks[i] = BlockPut{.key = ks[i],
                         .payload = buffers[i],
                         .bytes = static_cast<uint32_t>(buffers[i].size()),
                         .tokens = token_counts[i],
                         .type = types[i],
                         .transition = transitions[i],
                         .recompute_seconds = recompute_seconds};
  }
  std::shared_ptr<TieredStore> store = self.Get();
  Result<PutResult> result = [&] {
    py::gil_scoped_release release;
    return store->Put(blocks, parent_key);
  }();
  return ValueOrThrow(std::move(result));
}

py::list Get(PyStore& self, py::handle keys, py::handle outs, py::handle transition) {
  std::vector<BlockKey> ks = KeysFromPython(keys);
  HeldBuffers buffers(outs, /*writable=*/true, "outs");
  if (buffers.size() != ks.size()) {
    ThrowStatus(Status::InvalidArgument("get: " + std::to_string(ks.size()) + " keys but " +
                                        std::to_string(buffers.size()) + " outs"));
  }
  TransitionType t = TransitionTypeFromPython(transition);
  std::vector<std::size_t> sizes(ks.size(), 0);
  std::shared_ptr<TieredStore> store = self.Get();
  Result<std::size_t> read = [&] {
    py::gil_scoped_release release;
    return store->Get(ks, buffers.spans(), t, sizes);
  }();
  const std::size_t n = ValueOrThrow(std::move(read));
  py::list out;
  for (std::size_t i = 0; i < n; ++i) out.append(sizes[i]);
  return out;
}

}  // namespace

py::dict StoreStatsToPython(const StoreStats& s) {
  py::list tiers;
  for (const StoreTierStats& t : s.tiers) {
    py::dict d;
    d["name"] = t.name;
    d["kind"] = std::string(TierKindName(t.kind));
    d["capacity_bytes"] = t.capacity_bytes;
    d["used_bytes"] = t.used_bytes;
    d["blocks"] = t.blocks;
    d["hits"] = t.hits;
    d["promotions"] = t.promotions;
    d["demotions"] = t.demotions;
    d["drops"] = t.drops;
    d["refused"] = t.refused;
    d["promotions_declined"] = t.promotions_declined;
    d["promotions_used"] = t.promotions_used;
    d["promotions_wasted"] = t.promotions_wasted;
    d["promotion_rate"] = t.promotion_rate;
    tiers.append(d);
  }
  py::dict d;
  d["tiers"] = tiers;
  d["lookups"] = s.lookups;
  d["lookup_blocks"] = s.lookup_blocks;
  d["lookup_hit_blocks"] = s.lookup_hit_blocks;
  d["gets"] = s.gets;
  d["get_blocks"] = s.get_blocks;
  d["get_misses"] = s.get_misses;
  d["puts"] = s.puts;
  d["put_blocks"] = s.put_blocks;
  d["corrupt_blocks"] = s.corrupt_blocks;
  d["prefetch_issued"] = s.prefetch_issued;
  d["prefetch_used"] = s.prefetch_used;
  d["prefetch_wasted"] = s.prefetch_wasted;
  d["prefetch_wasted_bytes"] = s.prefetch_wasted_bytes;
  d["prefetch_window"] = s.prefetch_window;
  d["recompute_preferred"] = s.recompute_preferred;
  d["head_splits"] = s.head_splits;
  d["head_split_reads"] = s.head_split_reads;
  d["head_importance_assumed"] = s.head_importance_assumed;
  d["queued_moves"] = s.queued_moves;
  d["pinned_blocks"] = s.pinned_blocks;
  d["index_blocks"] = s.index_blocks;
  d["recovered_blocks"] = s.recovered_blocks;
  d["recovery_dropped_blocks"] = s.recovery_dropped_blocks;
  d["journal_records"] = s.journal_records;
  d["journal_ignored_bytes"] = s.journal_ignored_bytes;
  return d;
}

void BindStore(py::module_& m) {
  py::class_<PutResult>(m, "PutResult", "What a put stored.")
      .def_readonly("new_blocks", &PutResult::new_blocks)
      .def_readonly("present_blocks", &PutResult::present_blocks)
      .def_readonly("refused_blocks", &PutResult::refused_blocks)
      .def("__repr__", [](const PutResult& r) {
        return "PutResult(new_blocks=" + std::to_string(r.new_blocks) +
               ", present_blocks=" + std::to_string(r.present_blocks) +
               ", refused_blocks=" + std::to_string(r.refused_blocks) + ")";
      });

  py::class_<PyStorePin>(m, "StorePin", "Pinned blocks of a Store; unpinned by release(), collection or `with`.")
      .def("__len__", &PyStorePin::size)
      .def("release", &PyStorePin::Release)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyStorePin& self, py::args) { self.Release(); });

  py::class_<PyStore>(m, "Store", "A tiered KV-block store in this process (docs/python.md).")
      .def(py::init(&OpenStore), py::arg("tier_config") = py::none(), py::arg("policy") = "bayes",
           py::arg("data_dir") = py::none(), py::kw_only(), py::arg("tier_config_text") = py::none(),
           py::arg("mover_threads") = 2, py::arg("synchronous_moves") = false, py::arg("prefetch") = true,
           py::arg("promote_on_read") = true, py::arg("high_watermark") = 0.95, py::arg("low_watermark") = 0.85)
      .def("put", &Put, py::arg("keys"), py::arg("payloads"), py::arg("parent") = py::none(), py::arg("tokens") = 16,
           py::arg("block_type") = BlockType::kUserContext, py::arg("transition") = TransitionType::kSameToolRepeat,
           py::arg("recompute_seconds") = 0.0, "Stores a chain of blocks (keys[i]'s parent is keys[i-1]).")
      .def(
          "lookup",
          [](PyStore& self, py::handle keys) {
            std::vector<BlockKey> ks = KeysFromPython(keys);
            std::shared_ptr<TieredStore> store = self.Get();
            LookupResult r = [&] {
              py::gil_scoped_release release;
              return store->Lookup(ks);
            }();
            py::list tiers, sizes;
            for (int t : r.tier) tiers.append(t);
            for (uint32_t b : r.bytes) sizes.append(b);
            return py::make_tuple(r.prefix_blocks, tiers, sizes);
          },
          py::arg("keys"), "(prefix_blocks, tiers, sizes): the stored prefix of keys and where each block is.")
      .def("get", &Get, py::arg("keys"), py::arg("outs"), py::arg("transition") = TransitionType::kSameToolRepeat,
           "Reads the stored prefix of keys into the writable buffers outs; returns the sizes of the blocks read.")
      .def(
          "prefetch",
          [](PyStore& self, py::handle keys) {
            std::vector<BlockKey> ks = KeysFromPython(keys);
            std::shared_ptr<TieredStore> store = self.Get();
            py::gil_scoped_release release;
            store->Prefetch(ks);
          },
          py::arg("keys"))
      .def(
          "pin",
          [](PyStore& self, py::handle keys) {
            std::vector<BlockKey> ks = KeysFromPython(keys);
            std::shared_ptr<TieredStore> store = self.Get();
            Result<StorePin> pin = [&] {
              py::gil_scoped_release release;
              return store->Pin(ks);
            }();
            return PyStorePin(store, ValueOrThrow(std::move(pin)));
          },
          py::arg("keys"), "Keeps the stored prefix of keys from demotion and dropping while the StorePin lives.")
      .def(
          "update_tags",
          [](PyStore& self, py::handle updates) {
            std::vector<BlockTags> tags;
            for (py::handle u : updates) {
              auto t = py::reinterpret_borrow<py::sequence>(u);
              if (t.size() != 3)
                ThrowStatus(Status::InvalidArgument("update_tags: each update is (key, block_type, transition)"));
              tags.push_back({KeyFromPython(t[0]), BlockTypeFromPython(t[1]), TransitionTypeFromPython(t[2])});
            }
            std::shared_ptr<TieredStore> store = self.Get();
            py::gil_scoped_release release;
            store->Retag(tags);
          },
          py::arg("updates"), "Retags stored blocks: a sequence of (key, block_type, transition).")
      .def("stats", [](PyStore& self) { return StoreStatsToPython(self.Get()->GetStats()); })
      .def(
          "drain",
          [](PyStore& self) {
            std::shared_ptr<TieredStore> store = self.Get();
            py::gil_scoped_release release;
            store->Drain();
          },
          "Runs every queued move to completion.")
      .def("flush",
           [](PyStore& self) {
             std::shared_ptr<TieredStore> store = self.Get();
             Status s = [&] {
               py::gil_scoped_release release;
               return store->Flush();
             }();
             ThrowIfError(s);
           })
      .def_property_readonly("tier_count", [](PyStore& self) { return self.Get()->tier_count(); })
      .def("close", &PyStore::Close, "Finishes the moves in flight and closes the tiers.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyStore& self, py::args) { self.Close(); });
}

}  // namespace kvtier::python
