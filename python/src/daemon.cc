// kvtier.serve(): `kvtier serve` in this process (daemon.h), for tests and for engines that
// host the service themselves. The Daemon object stops it on stop(), on leaving a `with`
// block, or when collected.
#include "kvtier/daemon.h"

#include <memory>
#include <string>

#include "bindings.h"
#include "store_stats.h"

namespace kvtier::python {
namespace {

class PyDaemon {
 public:
  explicit PyDaemon(std::unique_ptr<Daemon> daemon) : daemon_(std::move(daemon)) {}
  ~PyDaemon() {
    if (daemon_) {
      py::gil_scoped_release release;
      (void)daemon_->Stop();
      daemon_.reset();
    }
  }

  Daemon& Get() const {
    if (!daemon_) ThrowStatus(Status::FailedPrecondition("the daemon is stopped"));
    return *daemon_;
  }
  bool running() const { return daemon_ != nullptr; }

  // Stops serving, flushes what the persistence mode says and drains the store. Idempotent.
  void Stop() {
    if (!daemon_) return;
    Status s = [&] {
      py::gil_scoped_release release;
      Status stopped = daemon_->Stop();
      daemon_.reset();
      return stopped;
    }();
    ThrowIfError(s);
  }

 private:
  std::unique_ptr<Daemon> daemon_;
};

std::unique_ptr<PyDaemon> Serve(py::object config_path, py::object data_dir, py::object config_text,
                                py::object socket_path, py::object tcp_port, py::object metrics_port,
                                const std::string& persist) {
  ServeConfig config;
  if (!config_path.is_none() && !config_text.is_none()) {
    ThrowStatus(Status::InvalidArgument("pass config_path or config_text, not both"));
  }
  if (!data_dir.is_none() && (!config_path.is_none() || !config_text.is_none())) {
    ThrowStatus(
        Status::InvalidArgument("data_dir applies to the default configuration only; a configuration "
                                "names its own data_dir"));
  }
  if (!config_text.is_none()) {
    config = ValueOrThrow(ParseServeConfig(config_text.cast<std::string>(), "config_text"));
  } else if (!config_path.is_none()) {
    config = ValueOrThrow(LoadServeConfig(py::str(config_path).cast<std::string>()));
  } else {
    config =
        DefaultServeConfig(data_dir.is_none() ? std::string("kvtier-data") : py::str(data_dir).cast<std::string>());
  }
  if (!socket_path.is_none()) config.server.unix_socket_path = py::str(socket_path).cast<std::string>();
  if (!tcp_port.is_none()) {
    const int port = tcp_port.cast<int>();
    if (port < 0 || port > 65535) ThrowStatus(Status::InvalidArgument("tcp_port must be in [0, 65535]"));
    config.server.tcp = true;
    config.server.tcp_port = static_cast<uint16_t>(port);
  }
  if (!metrics_port.is_none()) config.metrics_port = metrics_port.cast<int>();
  if (persist == "none") {
    config.persist = PersistChoice::kNone;
  } else if (persist == "write_through") {
    config.persist = PersistChoice::kWriteThrough;
  } else if (persist == "on_shutdown") {
    config.persist = PersistChoice::kOnShutdown;
  } else if (persist != "config") {
    ThrowStatus(Status::InvalidArgument("persist must be 'config', 'none', 'write_through' or 'on_shutdown', got '" +
                                        persist + "'"));
  }
  Result<std::unique_ptr<Daemon>> daemon = [&] {
    py::gil_scoped_release release;
    return Daemon::Start(std::move(config));
  }();
  return std::make_unique<PyDaemon>(ValueOrThrow(std::move(daemon)));
}

}  // namespace

void BindDaemon(py::module_& m) {
  py::class_<PyDaemon>(m, "Daemon", "`kvtier serve` running in this process (kvtier.serve()).")
      .def_property_readonly("socket_path", [](const PyDaemon& d) { return d.Get().server().unix_socket_path(); })
      .def_property_readonly("tcp_port", [](const PyDaemon& d) { return d.Get().server().tcp_port(); })
      .def_property_readonly("metrics_port", [](const PyDaemon& d) { return d.Get().metrics_port(); })
      .def_property_readonly("recovered_blocks", [](const PyDaemon& d) { return d.Get().recovered_blocks(); })
      .def_property_readonly("connections", [](const PyDaemon& d) { return d.Get().server().connections(); })
      .def_property_readonly("running", &PyDaemon::running)
      .def(
          "store_stats", [](const PyDaemon& d) { return StoreStatsToPython(d.Get().store().GetStats()); },
          "The counters of the daemon's store (all tenants).")
      .def("stop", &PyDaemon::Stop, "Stops serving, flushes what the persistence mode says; idempotent.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyDaemon& self, py::args) { self.Stop(); });

  m.def("serve", &Serve, py::arg("config_path") = py::none(), py::arg("data_dir") = py::none(), py::kw_only(),
        py::arg("config_text") = py::none(), py::arg("socket_path") = py::none(), py::arg("tcp_port") = py::none(),
        py::arg("metrics_port") = py::none(), py::arg("persist") = "config",
        "Starts `kvtier serve` in this process: a serve.yaml (config_path or config_text) or the embedded default "
        "under data_dir; socket_path, tcp_port (0: ephemeral), metrics_port (0: ephemeral, -1: off) and persist "
        "override it.");
}

}  // namespace kvtier::python
