// kvtier.Client: a connection to `kvtier serve` (client.h). Over the Unix socket its
// shared-memory segment is exposed as a writable memoryview (`shared_memory`): payloads that
// are views into it travel as references (the server copies once, between the segment and
// its tiers); any other buffer travels inline in the frame.
#include "kvtier/client.h"

#include <memory>
#include <string>

#include "bindings.h"
#include "kvtier/store.h"

namespace kvtier::python {
namespace {

// A connection; calls in flight share it (ClosableHandle).
class PyClient : public ClosableHandle<Client> {
 public:
  explicit PyClient(std::shared_ptr<Client> client) : ClosableHandle(std::move(client), "the client") {}
};

// Exports the shared segment through the buffer protocol, keeping the connection (and so the
// mapping) alive while any memoryview of it exists.
struct SharedMemoryExporter {
  std::shared_ptr<Client> client;
};

ClientOptions Options(std::string tenant, std::string auth_token, uint64_t shared_memory_bytes, int io_timeout_ms,
                      bool checksums) {
  ClientOptions o;
  o.checksums = checksums;
  o.tenant = std::move(tenant);
  o.auth_token = std::move(auth_token);
  o.shared_memory_bytes = shared_memory_bytes;
  o.io_timeout_ms = io_timeout_ms;
  return o;
}

std::unique_ptr<PyClient> Wrap(Result<std::unique_ptr<Client>> client) {
  return std::make_unique<PyClient>(std::shared_ptr<Client>(ValueOrThrow(std::move(client))));
}

PutResult Put(PyClient& self, py::handle keys, py::handle payloads, py::handle parent, py::handle tokens,
              py::handle block_type, py::handle transition) {
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
  std::vector<ClientBlock> blocks(ks.size());
  for (std::size_t i = 0; i < ks.size(); ++i) {
    blocks[i] = ClientBlock{
        .key = ks[i], .payload = buffers[i], .tokens = token_counts[i], .type = types[i], .transition = transitions[i]};
  }
  std::shared_ptr<Client> client = self.Get();
  Result<protocol::PutReply> reply = [&] {
    py::gil_scoped_release release;
    return client->Put(blocks, parent_key);
  }();
  protocol::PutReply r = ValueOrThrow(std::move(reply));
  return PutResult{.new_blocks = r.new_blocks, .present_blocks = r.present_blocks, .refused_blocks = r.refused_blocks};
}

py::list Get(PyClient& self, py::handle keys, py::handle outs, py::handle transition) {
  std::vector<BlockKey> ks = KeysFromPython(keys);
  HeldBuffers buffers(outs, /*writable=*/true, "outs");
  if (buffers.size() != ks.size()) {
    ThrowStatus(Status::InvalidArgument("get: " + std::to_string(ks.size()) + " keys but " +
                                        std::to_string(buffers.size()) + " outs"));
  }
  TransitionType t = TransitionTypeFromPython(transition);
  std::shared_ptr<Client> client = self.Get();
  Result<std::vector<uint32_t>> sizes = [&] {
    py::gil_scoped_release release;
    return client->Get(ks, buffers.spans(), t);
  }();
  return py::cast(ValueOrThrow(std::move(sizes)));
}

py::list Lookup(PyClient& self, py::handle chains) {
  if (!py::isinstance<py::sequence>(chains) || py::isinstance<py::str>(chains)) {
    ThrowStatus(Status::InvalidArgument("lookup: chains must be a sequence of key sequences"));
  }
  std::vector<std::vector<BlockKey>> cs;
  for (py::handle chain : chains) cs.push_back(KeysFromPython(chain));
  std::shared_ptr<Client> client = self.Get();
  Result<std::vector<protocol::ChainLookup>> reply = [&] {
    py::gil_scoped_release release;
    return client->Lookup(cs);
  }();
  py::list out;
  for (const protocol::ChainLookup& c : ValueOrThrow(std::move(reply))) {
    py::list tiers, sizes;
    for (uint8_t t : c.tier) tiers.append(t);
    for (uint32_t b : c.bytes) sizes.append(b);
    out.append(py::make_tuple(c.prefix_blocks, c.load_blocks, tiers, sizes));
  }
  return out;
}

template <typename F>
auto Call(PyClient& self, F f) {
  std::shared_ptr<Client> client = self.Get();
  auto result = [&] {
    py::gil_scoped_release release;
    return f(*client);
  }();
  return result;
}

}  // namespace

void BindClient(py::module_& m) {
  py::class_<SharedMemoryExporter>(m, "_SharedMemory", py::buffer_protocol()).def_buffer([](SharedMemoryExporter& e) {
    std::span<std::byte> seg = e.client->shared_memory();
    return py::buffer_info(seg.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                           {static_cast<py::ssize_t>(seg.size())}, {py::ssize_t{1}}, /*readonly=*/false);
  });

  py::class_<PyClient>(m, "Client", "A connection to `kvtier serve` (docs/python.md).")
      .def_static(
          "connect_unix",
          [](const std::string& path, std::string tenant, std::string auth_token, uint64_t shared_memory_bytes,
             int io_timeout_ms, bool checksums) {
            Result<std::unique_ptr<Client>> c = [&] {
              py::gil_scoped_release release;
              return Client::ConnectUnix(path, Options(std::move(tenant), std::move(auth_token), shared_memory_bytes,
                                                       io_timeout_ms, checksums));
            }();
            return Wrap(std::move(c));
          },
          py::arg("path"), py::arg("tenant") = "", py::arg("auth_token") = "",
          py::arg("shared_memory_bytes") = uint64_t{64} << 20, py::arg("io_timeout_ms") = 30000, py::kw_only(),
          py::arg("checksums") = true,
          "Connects over the Unix socket, sharing a memory segment of shared_memory_bytes (0: none). "
          "checksums=False speaks protocol version 1, without end-to-end checksums (an older server).")
      .def_static(
          "connect_tcp",
          [](const std::string& host, uint16_t port, std::string tenant, std::string auth_token, int io_timeout_ms,
             bool tls, std::string ca_file, std::string server_name, std::string cert_file, std::string key_file,
             bool checksums) {
            ClientOptions options = Options(std::move(tenant), std::move(auth_token), 0, io_timeout_ms, checksums);
            options.tls = {.enabled = tls,
                           .ca_file = std::move(ca_file),
                           .server_name = std::move(server_name),
                           .cert_file = std::move(cert_file),
                           .key_file = std::move(key_file)};
            Result<std::unique_ptr<Client>> c = [&] {
              py::gil_scoped_release release;
              return Client::ConnectTcp(host, port, std::move(options));
            }();
            return Wrap(std::move(c));
          },
          py::arg("host"), py::arg("port"), py::arg("tenant") = "", py::arg("auth_token") = "",
          py::arg("io_timeout_ms") = 30000, py::kw_only(), py::arg("tls") = false, py::arg("ca_file") = "",
          py::arg("server_name") = "", py::arg("cert_file") = "", py::arg("key_file") = "", py::arg("checksums") = true,
          "Connects over TCP; payloads travel inline. tls=True verifies the server's certificate against ca_file "
          "(default: the system's CAs) and server_name (default: host); cert_file and key_file present a client "
          "certificate. checksums=False: as for connect_unix.")
      .def_property_readonly(
          "shared_memory",
          [](PyClient& self) {
            py::object exporter = py::cast(SharedMemoryExporter{self.Get()});
            return py::memoryview(exporter);
          },
          "A writable memoryview of the segment shared with the server (empty over TCP).")
      .def_property_readonly("tier_count", [](PyClient& self) { return self.Get()->tier_count(); })
      .def_property_readonly(
          "checksum_mismatches", [](PyClient& self) { return self.Get()->checksum_mismatches(); },
          "Blocks get() received whose bytes did not match their end-to-end checksum (each raised CorruptionError).")
      .def("lookup", &Lookup, py::arg("chains"),
           "For each chain: (prefix_blocks, load_blocks, tiers, sizes) of its longest stored prefix.")
      .def("put", &Put, py::arg("keys"), py::arg("payloads"), py::arg("parent") = py::none(), py::arg("tokens") = 16,
           py::arg("block_type") = BlockType::kUserContext, py::arg("transition") = TransitionType::kSameToolRepeat,
           "Stores a chain; payloads inside shared_memory travel as references, others inline.")
      .def("get", &Get, py::arg("keys"), py::arg("outs"), py::arg("transition") = TransitionType::kSameToolRepeat,
           "Reads the stored prefix of keys into outs (all inside shared_memory or all outside); returns sizes.")
      .def(
          "prefetch",
          [](PyClient& self, py::handle keys) {
            std::vector<BlockKey> ks = KeysFromPython(keys);
            ThrowIfError(Call(self, [&](Client& c) { return c.Prefetch(ks); }));
          },
          py::arg("keys"))
      .def(
          "pin",
          [](PyClient& self, py::handle keys) {
            std::vector<BlockKey> ks = KeysFromPython(keys);
            protocol::PinReply r = ValueOrThrow(Call(self, [&](Client& c) { return c.Pin(ks); }));
            return py::make_tuple(r.pin_id, r.pinned_blocks);
          },
          py::arg("keys"), "Pins the stored prefix of keys: (pin_id, pinned_blocks).")
      .def(
          "unpin",
          [](PyClient& self, uint64_t pin_id) { ThrowIfError(Call(self, [&](Client& c) { return c.Unpin(pin_id); })); },
          py::arg("pin_id"))
      .def(
          "expect",
          [](PyClient& self, py::handle keys) {
            const std::vector<BlockKey> ks = KeysFromPython(keys);
            return ValueOrThrow(Call(self, [&](Client& c) { return c.Expect(ks); }));
          },
          py::arg("keys"),
          "A queued request will read keys (its prompt's chain, root first): the server keeps them "
          "over other blocks until unexpect(id) or the connection closes. Returns the id.")
      .def(
          "unexpect",
          [](PyClient& self, uint64_t expect_id) {
            ThrowIfError(Call(self, [&](Client& c) { return c.Unexpect(expect_id); }));
          },
          py::arg("expect_id"))
      .def(
          "update_tags",
          [](PyClient& self, py::handle updates) {
            std::vector<protocol::TagUpdate> tags;
            for (py::handle u : updates) {
              auto t = py::reinterpret_borrow<py::sequence>(u);
              if (t.size() != 3)
                ThrowStatus(Status::InvalidArgument("update_tags: each update is (key, block_type, transition)"));
              tags.push_back({KeyFromPython(t[0]), BlockTypeFromPython(t[1]), TransitionTypeFromPython(t[2])});
            }
            ThrowIfError(Call(self, [&](Client& c) { return c.UpdateTags(tags); }));
          },
          py::arg("updates"), "Retags stored blocks: a sequence of (key, block_type, transition).")
      .def(
          "report_importance",
          [](PyClient& self, const std::vector<std::tuple<uint32_t, uint32_t, double>>& reports) {
            std::vector<protocol::ImportanceReport> rs;
            rs.reserve(reports.size());
            for (const auto& [layer, head, value] : reports) rs.push_back({layer, head, value});
            ThrowIfError(Call(self, [&](Client& c) { return c.ReportImportance(rs); }));
          },
          py::arg("reports"), "Head-importance reports: a sequence of (layer, head, value).")
      .def(
          "stats",
          [](PyClient& self) {
            std::string json = ValueOrThrow(Call(self, [](Client& c) { return c.Stats(); }));
            return py::module_::import("json").attr("loads")(json);
          },
          "The server's counters (its JSON, parsed).")
      .def("close", &PyClient::Close, "Closes the connection (once no memoryview of shared_memory remains).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyClient& self, py::args) { self.Close(); });
}

}  // namespace kvtier::python
