// Block keys as 16-byte `bytes` (hi then lo, big-endian: BlockKey::FromDigestBytes and its
// inverse), the BlockType / TransitionType enums, and chain_keys / chain_digests over the
// library's BlockHasher.
#include <algorithm>
#include <array>
#include <string>
#include <string_view>

#include "bindings.h"

namespace kvtier::python {
namespace {

// The bytes of a bytes-like object (copied into `holder` unless it is `bytes`); empty if it
// is not one.
std::string_view BytesOf(py::handle object, py::object& holder) {
  if (!PyBytes_Check(object.ptr())) {
    if (PyObject_CheckBuffer(object.ptr()) == 0) return {};
    holder = py::reinterpret_steal<py::object>(PyBytes_FromObject(object.ptr()));
    if (!holder) throw py::error_already_set();
    object = holder;
  }
  return {PyBytes_AS_STRING(object.ptr()), static_cast<std::size_t>(PyBytes_GET_SIZE(object.ptr()))};
}

template <typename E, std::size_t N>
E EnumFromPython(py::handle object, const char* what, std::string_view (*name_of)(E)) {
  if (py::isinstance<py::str>(object)) {
    const std::string name = object.cast<std::string>();
    for (std::size_t i = 0; i < N; ++i) {
      if (name_of(static_cast<E>(i)) == name) return static_cast<E>(i);
    }
    std::string names;
    for (std::size_t i = 0; i < N; ++i) names += (i ? ", " : "") + std::string(name_of(static_cast<E>(i)));
    ThrowStatus(Status::InvalidArgument(std::string(what) + " '" + name + "' is not one of " + names));
  }
  if (py::isinstance<E>(object)) return object.cast<E>();
  if (py::isinstance<py::int_>(object)) {
    const auto value = object.cast<long long>();
    if (value >= 0 && value < static_cast<long long>(N)) return static_cast<E>(value);
  }
  ThrowStatus(Status::InvalidArgument(std::string(what) + " must be a kvtier." +
                                      (std::string_view(what) == "block_type" ? "BlockType" : "TransitionType") +
                                      ", its name or its number, got " + std::string(py::repr(object))));
}

template <typename T, typename F>
std::vector<T> PerBlock(py::handle object, std::size_t blocks, const char* what, F convert) {
  if (py::isinstance<py::str>(object) || !py::isinstance<py::sequence>(object)) {
    return std::vector<T>(blocks, convert(object));
  }
  auto seq = py::reinterpret_borrow<py::sequence>(object);
  if (seq.size() != blocks) {
    ThrowStatus(Status::InvalidArgument(std::string(what) + " has " + std::to_string(seq.size()) + " entries for " +
                                        std::to_string(blocks) + " keys"));
  }
  std::vector<T> out;
  out.reserve(blocks);
  for (std::size_t i = 0; i < blocks; ++i) out.push_back(convert(seq[i]));
  return out;
}

std::vector<TokenId> TokensFromPython(py::handle object) {
  if (!py::isinstance<py::sequence>(object) && PyObject_CheckBuffer(object.ptr()) == 0) {
    ThrowStatus(Status::InvalidArgument("token_ids must be a sequence of integers"));
  }
  py::sequence seq = py::reinterpret_borrow<py::object>(object);
  std::vector<TokenId> tokens;
  tokens.reserve(seq.size());
  for (std::size_t i = 0; i < seq.size(); ++i) {
    py::object item = seq[i];
    long long value = -1;
    try {
      value = py::int_(item).cast<long long>();
    } catch (const py::error_already_set&) {
      value = -1;
    } catch (const py::cast_error&) {
      value = -1;
    }
    if (value < 0 || value > 0xFFFFFFFFLL) {
      ThrowStatus(Status::InvalidArgument("token_ids[" + std::to_string(i) + "] = " + std::string(py::repr(item)) +
                                          " is not a token id (an integer in [0, 2^32))"));
    }
    tokens.push_back(static_cast<TokenId>(value));
  }
  return tokens;
}

std::vector<BlockDigest> HashChainFromPython(py::handle token_ids, int64_t block_size, const std::string& algorithm,
                                             py::handle parent, const std::string& root_seed,
                                             const RequestExtras& extras, int64_t first_token) {
  BlockHasherOptions options{
      .algorithm = ValueOrThrow(ParseBlockHashAlgorithm(algorithm)), .block_size = block_size, .root_seed = root_seed};
  BlockHasher hasher = ValueOrThrow(BlockHasher::Create(options));
  std::optional<BlockDigest> parent_digest;
  if (!parent.is_none()) {
    py::object holder;
    std::string_view bytes = BytesOf(parent, holder);
    if (bytes.size() != hasher.root().size) {
      ThrowStatus(Status::InvalidArgument("parent must be the full " + std::to_string(hasher.root().size) +
                                          "-byte digest of the previous block (chain_digests), got " +
                                          std::to_string(bytes.size()) + " bytes"));
    }
    BlockDigest d;
    d.size = hasher.root().size;
    std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(d.bytes.data()));
    parent_digest = d;
  }
  if (first_token < 0 || (parent_digest.has_value() && first_token % block_size != 0)) {
    ThrowStatus(Status::InvalidArgument("first_token must be a non-negative multiple of block_size"));
  }
  std::vector<TokenId> tokens = TokensFromPython(token_ids);
  py::gil_scoped_release release;
  return hasher.HashChain(tokens, extras, parent_digest, first_token);
}

}  // namespace

BlockKey KeyFromPython(py::handle object, std::size_t index) {
  py::object holder;
  std::string_view bytes = BytesOf(object, holder);
  if (bytes.size() != 16 && bytes.size() != 32) {
    ThrowStatus(Status::InvalidArgument("key " + std::to_string(index) +
                                        " must be 16 bytes (or a 32-byte digest), got " +
                                        std::string(py::repr(object)).substr(0, 80)));
  }
  return BlockKey::FromDigestBytes({reinterpret_cast<const uint8_t*>(bytes.data()), 16});
}

std::vector<BlockKey> KeysFromPython(py::handle sequence) {
  if (!py::isinstance<py::sequence>(sequence) || py::isinstance<py::str>(sequence) ||
      PyObject_CheckBuffer(sequence.ptr()) != 0) {
    ThrowStatus(Status::InvalidArgument("keys must be a sequence (list or tuple) of 16-byte bytes"));
  }
  auto seq = py::reinterpret_borrow<py::sequence>(sequence);
  std::vector<BlockKey> keys;
  keys.reserve(seq.size());
  for (std::size_t i = 0; i < seq.size(); ++i) keys.push_back(KeyFromPython(seq[i], i));
  return keys;
}

std::optional<BlockKey> OptionalKeyFromPython(py::handle object) {
  if (object.is_none()) return std::nullopt;
  return KeyFromPython(object);
}

py::bytes KeyToPython(const BlockKey& key) {
  std::array<char, 16> out{};
  for (std::size_t i = 0; i < 8; ++i) {
    out[i] = static_cast<char>(static_cast<uint8_t>(key.hi >> (56 - 8 * i)));
    out[8 + i] = static_cast<char>(static_cast<uint8_t>(key.lo >> (56 - 8 * i)));
  }
  return {out.data(), out.size()};
}

BlockType BlockTypeFromPython(py::handle object) {
  return EnumFromPython<BlockType, 4>(object, "block_type", &BlockTypeName);
}
TransitionType TransitionTypeFromPython(py::handle object) {
  return EnumFromPython<TransitionType, 4>(object, "transition", &TransitionTypeName);
}

std::vector<uint32_t> PerBlockTokens(py::handle object, std::size_t blocks) {
  return PerBlock<uint32_t>(object, blocks, "tokens", [](py::handle v) {
    const long long n = py::isinstance<py::int_>(v) ? v.cast<long long>() : -1;
    if (n < 0 || n > 0xFFFFFFFFLL) ThrowStatus(Status::InvalidArgument("tokens must be integers in [0, 2^32)"));
    return static_cast<uint32_t>(n);
  });
}
std::vector<BlockType> PerBlockTypes(py::handle object, std::size_t blocks) {
  return PerBlock<BlockType>(object, blocks, "block_type", BlockTypeFromPython);
}
std::vector<TransitionType> PerBlockTransitions(py::handle object, std::size_t blocks) {
  return PerBlock<TransitionType>(object, blocks, "transition", TransitionTypeFromPython);
}

void BindKeys(py::module_& m) {
  py::enum_<BlockType>(m, "BlockType", "The paper's block types (on the wire: do not renumber).")
      .value("SYSTEM_PROMPT", BlockType::kSystemPrompt)
      .value("TOOL_CONTEXT", BlockType::kToolContext)
      .value("USER_CONTEXT", BlockType::kUserContext)
      .value("INTERMEDIATE_REASONING", BlockType::kIntermediateReasoning)
      .def_property_readonly("label", [](BlockType t) { return std::string(BlockTypeName(t)); });
  py::enum_<TransitionType>(m, "TransitionType", "The paper's transition types (on the wire: do not renumber).")
      .value("SAME_TOOL_REPEAT", TransitionType::kSameToolRepeat)
      .value("TOOL_SWITCH", TransitionType::kToolSwitch)
      .value("REASONING_STEP", TransitionType::kReasoningStep)
      .value("AGENT_HANDOFF", TransitionType::kAgentHandoff)
      .def_property_readonly("label", [](TransitionType t) { return std::string(TransitionTypeName(t)); });

  auto extras_of = [](std::string cache_salt, std::string lora_name, std::string lora_path) {
    return RequestExtras{
        .cache_salt = std::move(cache_salt), .lora_name = std::move(lora_name), .lora_path = std::move(lora_path)};
  };
  m.def(
      "chain_digests",
      [extras_of](py::handle token_ids, int64_t block_size, const std::string& algorithm, py::handle parent,
                  const std::string& root_seed, std::string cache_salt, std::string lora_name, std::string lora_path,
                  int64_t first_token) {
        std::vector<BlockDigest> digests = HashChainFromPython(
            token_ids, block_size, algorithm, parent, root_seed,
            extras_of(std::move(cache_salt), std::move(lora_name), std::move(lora_path)), first_token);
        py::list out;
        for (const BlockDigest& d : digests)
          out.append(py::bytes(reinterpret_cast<const char*>(d.bytes.data()), d.size));
        return out;
      },
      py::arg("token_ids"), py::arg("block_size") = 16, py::arg("algorithm") = "xxh3_128",
      py::arg("parent") = py::none(), py::kw_only(), py::arg("root_seed") = "vllm-none-hash",
      py::arg("cache_salt") = "", py::arg("lora_name") = "", py::arg("lora_path") = "", py::arg("first_token") = 0,
      "Full digests (16 bytes for xxh3_128, 32 for sha256 / sha256_cbor) of every full block of token_ids.");
  m.def(
      "chain_keys",
      [extras_of](py::handle token_ids, int64_t block_size, const std::string& algorithm, py::handle parent,
                  const std::string& root_seed, std::string cache_salt, std::string lora_name, std::string lora_path,
                  int64_t first_token) {
        std::vector<BlockDigest> digests = HashChainFromPython(
            token_ids, block_size, algorithm, parent, root_seed,
            extras_of(std::move(cache_salt), std::move(lora_name), std::move(lora_path)), first_token);
        py::list out;
        for (const BlockDigest& d : digests) out.append(KeyToPython(d.key()));
        return out;
      },
      py::arg("token_ids"), py::arg("block_size") = 16, py::arg("algorithm") = "xxh3_128",
      py::arg("parent") = py::none(), py::kw_only(), py::arg("root_seed") = "vllm-none-hash",
      py::arg("cache_salt") = "", py::arg("lora_name") = "", py::arg("lora_path") = "", py::arg("first_token") = 0,
      "16-byte block keys of every full block of token_ids (a partial last block gets none).");
  m.def(
      "key_hex", [](py::handle key) { return KeyFromPython(key).ToHex(); }, py::arg("key"),
      "The 32 hex digits of a key, as the CLI and logs print it.");
  m.def(
      "key_from_hex", [](std::string_view hex) { return KeyToPython(ValueOrThrow(BlockKey::FromHex(hex))); },
      py::arg("hex"), "The 16-byte key of 32 hex digits.");
}

}  // namespace kvtier::python
