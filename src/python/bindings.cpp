// maf_sandbox._native: the backends, the router and a sandbox, for maf_sandbox's pure-Python
// layer. Values cross as plain Python data (tuples, dicts, strings, bytes): the dataclasses and
// enums a user sees are Python's own (maf_sandbox/types.py), so this file converts, starts Tasks
// on the module's loop (bridge.hpp) and holds nothing of Python's between calls.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bridge.hpp"
#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/types.hpp"
#include "maf_sandbox/core/vocabulary.hpp"
#include "maf_sandbox/local/local_backend.hpp"

namespace maf_sandbox::python {

namespace {

// A C++ object Python holds. Its last reference may go on the loop thread (no GIL) or in Python
// (GIL held); a backend's destructor can wait for its own threads, so the GIL is let go first.
template <typename T>
struct Held {
    explicit Held(std::shared_ptr<T> held) : ptr(std::move(held)) {}
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    ~Held() {
        if (ptr && PyGILState_Check() != 0) {
            const py::gil_scoped_release release;
            ptr.reset();
        }
    }
    std::shared_ptr<T> ptr;
};

using BackendHandle = Held<SandboxBackend>;
using SandboxHandle = Held<Sandbox>;
using RouterHandle = Held<SandboxRouter>;

// --- From Python ---------------------------------------------------------------------------

template <typename T>
std::optional<T> optional_item(const py::dict& values, const char* name) {
    if (!values.contains(name) || values[name].is_none()) {
        return std::nullopt;
    }
    return values[name].cast<T>();
}

template <typename T>
void read_item(const py::dict& values, const char* name, T& into) {
    if (auto value = optional_item<T>(values, name)) {
        into = std::move(*value);
    }
}

void read_seconds(const py::dict& values, const char* name, Seconds& into) {
    if (auto value = optional_item<double>(values, name)) {
        into = Seconds{*value};
    }
}

SandboxKey key_from(const py::tuple& key) {
    if (key.size() != 4) {
        throw InvalidArgument("a SandboxKey crosses as (scope, thread_id, agent_dir, call_id)");
    }
    return SandboxKey{key[0].cast<std::string>(), key[1].cast<std::string>(),
                      key[2].cast<std::string>(), key[3].cast<std::string>()};
}

TransferLimits limits_from(const py::handle& limits) {
    const auto values = limits.cast<std::vector<std::uint64_t>>();
    if (values.size() != 3) {
        throw InvalidArgument(
            "transfer limits cross as (max_bytes_per_file, max_total_bytes, max_files)");
    }
    return TransferLimits{values[0], values[1], values[2]};
}

// The plain-data form maf_sandbox.types.SandboxSpec._native() builds; the C++ constructor then
// enforces the spec's invariants (InvalidArgument).
SandboxSpec spec_from(const py::dict& spec) {
    SandboxSpecFields fields;
    fields.kind = spec["kind"].cast<std::string>();
    fields.image = optional_item<std::string>(spec, "image");
    fields.image_id = optional_item<std::string>(spec, "image_id");
    read_item(spec, "egress_allow", fields.egress_allow);
    fields.work_dir = optional_item<std::string>(spec, "work_dir");
    read_item(spec, "labels", fields.labels);
    if (auto requires_ = optional_item<std::vector<std::string>>(spec, "requires")) {
        fields.requires_capabilities.clear();
        for (const auto& capability : *requires_) {
            fields.requires_capabilities.insert(parse_capability(capability));
        }
    }
    if (auto rung = optional_item<std::string>(spec, "min_isolation")) {
        fields.min_isolation = parse_isolation(*rung);
    }
    if (spec.contains("declared_outputs")) {
        for (const auto& item : spec["declared_outputs"]) {
            const auto output = item.cast<py::dict>();
            DeclaredOutput declared;
            declared.path = output["path"].cast<std::string>();
            declared.disposition =
                parse_output_disposition(output["disposition"].cast<std::string>());
            declared.media_type = optional_item<std::string>(output, "media_type");
            declared.required = output["required"].cast<bool>();
            declared.name = optional_item<std::string>(output, "name");
            fields.declared_outputs.push_back(std::move(declared));
        }
    }
    if (spec.contains("files_in")) {
        fields.files_in = limits_from(spec["files_in"]);
    }
    if (spec.contains("files_out")) {
        fields.files_out = limits_from(spec["files_out"]);
    }
    read_item(spec, "outputs_named_at_call_time", fields.outputs_named_at_call_time);
    if (auto egress = optional_item<std::string>(spec, "egress")) {
        fields.egress = parse_egress(*egress);
    }
    if (auto family = optional_item<std::string>(spec, "requires_os_family")) {
        fields.requires_os_family = parse_os_family(*family);
    }
    if (auto scope = optional_item<std::string>(spec, "isolation_scope")) {
        fields.isolation_scope = parse_isolation_scope(*scope);
    }
    return SandboxSpec(std::move(fields));
}

ExecRequest exec_request_from(const py::object& command, std::string working_directory,
                              double timeout, std::map<std::string, std::string> environment,
                              py::bytes stdin_bytes, std::optional<std::uint64_t> max_output) {
    ExecRequest request;
    if (py::isinstance<py::str>(command)) {
        request.command = command.cast<std::string>();
    } else {
        request.command = command.cast<Argv>();
    }
    request.working_directory = std::move(working_directory);
    request.timeout = Seconds{timeout};
    request.environment = std::move(environment);
    request.stdin_bytes = std::string(stdin_bytes);
    request.max_output_bytes = max_output;
    return request;
}

local::LocalBackendConfig local_config_from(const py::dict& values) {
    local::LocalBackendConfig config;
    if (auto state_dir = optional_item<std::string>(values, "state_dir")) {
        config.state_dir = *state_dir;
    }
    read_item(values, "default_image", config.default_image);
    read_item(values, "memory_bytes", config.memory_bytes);
    read_item(values, "pids", config.pids);
    read_item(values, "cpus", config.cpus);
    read_item(values, "disk_bytes", config.disk_bytes);
    read_item(values, "tmp_bytes", config.tmp_bytes);
    read_item(values, "root_inside", config.root_inside);
    read_item(values, "default_max_output_bytes", config.default_max_output_bytes);
    read_item(values, "pool_size", config.pool_size);
    read_item(values, "owned_by_this_process", config.owned_by_this_process);
    // Zero or less: no such bound (the C++ config's nullopt).
    for (const auto& [name, bound] : {std::pair{"idle_timeout_seconds", &config.idle_timeout},
                                      std::pair{"max_lifetime_seconds", &config.max_lifetime}}) {
        if (values.contains(name)) {
            const auto seconds = optional_item<std::int64_t>(values, name);
            *bound = seconds && *seconds > 0
                         ? std::optional<std::chrono::seconds>(std::chrono::seconds(*seconds))
                         : std::nullopt;
        }
    }
    return config;
}

acas::AcasSandboxConfig acas_config_from(const py::dict& values) {
    acas::AcasSandboxConfig config;
    read_item(values, "endpoint", config.endpoint);
    read_item(values, "subscription_id", config.subscription_id);
    read_item(values, "resource_group", config.resource_group);
    read_item(values, "sandbox_group", config.sandbox_group);
    read_item(values, "registry", config.registry);
    config.ca_file = optional_item<std::string>(values, "ca_file");
    config.token = optional_item<std::string>(values, "token");
    read_item(values, "emulator", config.emulator);
    read_item(values, "auto_suspend_seconds", config.auto_suspend_seconds);
    read_item(values, "auto_delete_seconds", config.auto_delete_seconds);
    read_seconds(values, "read_timeout_seconds", config.read_timeout);
    read_seconds(values, "create_timeout_seconds", config.create_timeout);
    read_seconds(values, "delete_timeout_seconds", config.delete_timeout);
    read_seconds(values, "resume_timeout_seconds", config.resume_timeout);
    read_seconds(values, "probe_timeout_seconds", config.probe_timeout);
    read_seconds(values, "poll_interval_seconds", config.poll_interval);
    read_item(values, "exec_output_limit_bytes", config.exec_output_limit_bytes);
    read_item(values, "max_clients_per_loop", config.max_clients_per_loop);
    read_seconds(values, "client_wait_seconds", config.client_wait);
    read_seconds(values, "client_close_seconds", config.client_close);
    read_item(values, "silence_preview_warning", config.silence_preview_warning);
    return config;
}

SandboxRouterOptions router_options_from(const py::dict& values) {
    SandboxRouterOptions options;
    if (auto rung = optional_item<std::string>(values, "min_isolation")) {
        options.min_isolation = parse_isolation(*rung);
    }
    options.selected = optional_item<std::string>(values, "selected");
    if (auto denied = optional_item<std::vector<std::string>>(values, "denied_capabilities")) {
        for (const auto& capability : *denied) {
            options.denied_capabilities.insert(parse_capability(capability));
        }
    }
    if (auto denied = optional_item<std::vector<std::string>>(values, "denied_identities")) {
        for (const auto& identity : *denied) {
            options.denied_identities.insert(parse_identity(identity));
        }
    }
    if (auto scope = optional_item<std::string>(values, "min_isolation_scope")) {
        options.min_isolation_scope = parse_isolation_scope(*scope);
    }
    return options;
}

// --- To Python (with the GIL) --------------------------------------------------------------

template <typename E>
std::vector<std::string> names_of(const std::set<E>& values) {
    std::vector<std::string> names;
    for (const auto value : values) {
        names.emplace_back(to_string(value));
    }
    return names;
}

py::tuple limits_to(const TransferLimits& limits) {
    return py::make_tuple(limits.max_bytes_per_file, limits.max_total_bytes, limits.max_files);
}

py::dict declarations_to(const BackendDeclarations& declarations) {
    py::dict values;
    values["capabilities"] = names_of(declarations.capabilities);
    values["files_in"] = limits_to(declarations.limits.files_in);
    values["files_out"] = limits_to(declarations.limits.files_out);
    values["egress_modes"] = names_of(declarations.egress_modes);
    values["os_families"] = names_of(declarations.os_families);
    values["isolation_scopes"] = names_of(declarations.isolation_scopes);
    return values;
}

py::object failure_to(const std::optional<DisposalFailure>& failure) {
    if (!failure) {
        return py::none();
    }
    return py::make_tuple(std::string(to_string(failure->code)), failure->detail);
}

py::object entry_to(const SandboxEntry& entry) {
    return py::make_tuple(entry.path, std::string(to_string(entry.kind)),
                          entry.size_bytes ? py::cast(*entry.size_bytes) : py::none());
}

py::object sandbox_to(std::shared_ptr<Sandbox> sandbox) {
    return py::cast(std::make_shared<SandboxHandle>(std::move(sandbox)));
}

py::object nothing() {
    return py::none();
}

// A Task of a method keeps its object alive: Python may drop its last handle while it runs (the
// parameter lives in the coroutine's frame until the Task ends).
template <typename T, typename Owner>
Task<T> holding([[maybe_unused]] std::shared_ptr<Owner> owner, Task<T> task) {
    if constexpr (std::is_void_v<T>) {
        co_await std::move(task);
    } else {
        co_return co_await std::move(task);
    }
}

// --- The bound operations ------------------------------------------------------------------

Operation acquire_on(const std::shared_ptr<SandboxBackend>& backend, py::object done,
                     const py::tuple& key, const py::dict& spec) {
    return launch(std::move(done),
                  holding(backend, backend->acquire(key_from(key), spec_from(spec))), sandbox_to);
}

Operation backend_dispose(BackendHandle& self, py::object done, const py::tuple& key,
                          std::optional<std::string> kind) {
    return launch(std::move(done),
                  holding(self.ptr, self.ptr->dispose(key_from(key), std::move(kind))), failure_to);
}

Operation purge_to(Task<ScopePurge> task, py::object done) {
    return launch(std::move(done), std::move(task), [](ScopePurge purge) -> py::object {
        return py::make_tuple(purge.disposed, failure_to(purge.undisposed));
    });
}

std::shared_ptr<local::LocalBackend> local_of(const BackendHandle& self) {
    auto backend = std::dynamic_pointer_cast<local::LocalBackend>(self.ptr);
    if (!backend) {
        throw py::type_error("this is a local backend's operation");
    }
    return backend;
}

std::shared_ptr<acas::AcasBackend> acas_of(const BackendHandle& self) {
    auto backend = std::dynamic_pointer_cast<acas::AcasBackend>(self.ptr);
    if (!backend) {
        throw py::type_error("discover() is an ACAS backend's");
    }
    return backend;
}

// Made without the GIL: a local backend's constructor opens and checks its state directory.
template <typename Backend, typename Config>
std::shared_ptr<BackendHandle> make_backend(Config config) {
    std::shared_ptr<Backend> backend;
    {
        const py::gil_scoped_release release;
        backend = std::make_shared<Backend>(std::move(config));
    }
    return std::make_shared<BackendHandle>(std::move(backend));
}

}  // namespace

void define_module(py::module_& module) {
    module.doc() = "The C++ core of maf_sandbox (import maf_sandbox, not this module)";
    register_error_translator();

    module.attr("RESULT") = static_cast<int>(Outcome::result);
    module.attr("ERROR") = static_cast<int>(Outcome::error);
    module.attr("CANCELLED") = static_cast<int>(Outcome::cancelled);

    py::class_<Operation>(module, "Operation")
        .def("cancel", &Operation::cancel, "Emits a terminal cancellation into the C++ Task");

    module.def(
        "shutdown", [] { EventLoop::instance().shutdown(); },
        "Cancels what still runs, waits for its cleanup, and stops the loop thread (atexit)");

    // Each vocabulary string through the C++ table: the Python enums are checked against it.
    module.def("canonical", [](const std::string& vocabulary, const std::string& value) {
        if (vocabulary == "isolation") {
            return std::string(to_string(parse_isolation(value)));
        }
        if (vocabulary == "capability") {
            return std::string(to_string(parse_capability(value)));
        }
        if (vocabulary == "egress") {
            return std::string(to_string(parse_egress(value)));
        }
        if (vocabulary == "os_family") {
            return std::string(to_string(parse_os_family(value)));
        }
        if (vocabulary == "entry_kind") {
            return std::string(to_string(parse_entry_kind(value)));
        }
        if (vocabulary == "isolation_scope") {
            return std::string(to_string(parse_isolation_scope(value)));
        }
        if (vocabulary == "output_disposition") {
            return std::string(to_string(parse_output_disposition(value)));
        }
        if (vocabulary == "identity") {
            return std::string(to_string(parse_identity(value)));
        }
        if (vocabulary == "disposal_code") {
            return std::string(to_string(parse_disposal_code(value)));
        }
        throw InvalidArgument("no vocabulary named " + vocabulary);
    });

    py::class_<BackendHandle, std::shared_ptr<BackendHandle>>(module, "Backend")
        .def_property_readonly("name", [](const BackendHandle& self) { return self.ptr->name(); })
        .def_property_readonly(
            "isolation",
            [](const BackendHandle& self) { return std::string(to_string(self.ptr->isolation())); })
        .def("declarations",
             [](const BackendHandle& self) { return declarations_to(self.ptr->declarations()); })
        .def("acquire",
             [](BackendHandle& self, py::object done, const py::tuple& key, const py::dict& spec) {
                 return acquire_on(self.ptr, std::move(done), key, spec);
             })
        .def("dispose", &backend_dispose)
        .def("dispose_scope",
             [](BackendHandle& self, py::object done, std::string scope, std::string thread) {
                 return purge_to(holding(self.ptr, self.ptr->dispose_scope(std::move(scope),
                                                                           std::move(thread))),
                                 std::move(done));
             })
        .def("close",
             [](BackendHandle& self, py::object done) {
                 return launch(std::move(done), holding(self.ptr, self.ptr->close()), nothing);
             })
        .def("local_list",
             [](const BackendHandle& self, const std::vector<std::string>& selector) {
                 auto backend = local_of(self);
                 std::vector<local::LocalSandboxInfo> listed;
                 {
                     const py::gil_scoped_release release;
                     listed = backend->list(selector);
                 }
                 py::list infos;
                 for (const auto& info : listed) {
                     infos.append(py::make_tuple(info.id, info.labels, info.image, info.state));
                 }
                 return infos;
             })
        .def("local_remove",
             [](const BackendHandle& self, const std::string& id) {
                 auto backend = local_of(self);
                 const py::gil_scoped_release release;
                 return backend->remove(id);
             })
        .def("discover", [](BackendHandle& self, py::object done) {
            auto backend = acas_of(self);
            return launch(std::move(done), holding(backend, backend->discover()), nothing);
        });

    module.def("local_backend", [](const py::dict& config) {
        return make_backend<local::LocalBackend>(local_config_from(config));
    });
    module.def("acas_backend", [](const py::dict& config) {
        return make_backend<acas::AcasBackend>(acas_config_from(config));
    });

    py::class_<RouterHandle, std::shared_ptr<RouterHandle>>(module, "Router")
        .def(py::init([](const std::vector<std::shared_ptr<BackendHandle>>& backends,
                         const py::dict& options) {
            std::vector<std::shared_ptr<SandboxBackend>> held;
            for (const auto& backend : backends) {
                if (!backend) {
                    throw InvalidArgument("a router's backend may not be None");
                }
                held.push_back(backend->ptr);
            }
            return std::make_shared<RouterHandle>(
                std::make_shared<SandboxRouter>(std::move(held), router_options_from(options)));
        }))
        .def_property_readonly("enabled",
                               [](const RouterHandle& self) { return self.ptr->enabled(); })
        .def_property_readonly("min_isolation",
                               [](const RouterHandle& self) {
                                   return std::string(to_string(self.ptr->min_isolation()));
                               })
        .def_property_readonly("backend_name",
                               [](const RouterHandle& self) -> py::object {
                                   if (!self.ptr->backend()) {
                                       return py::none();
                                   }
                                   return py::str(self.ptr->backend()->name());
                               })
        .def("ensure_can_serve",
             [](const RouterHandle& self, const py::dict& spec) {
                 self.ptr->ensure_can_serve(spec_from(spec));
             })
        .def("acquire",
             [](RouterHandle& self, py::object done, const py::tuple& key, const py::dict& spec) {
                 return launch(std::move(done),
                               holding(self.ptr, self.ptr->acquire(key_from(key), spec_from(spec))),
                               sandbox_to);
             })
        .def("dispose",
             [](RouterHandle& self, py::object done, const py::tuple& key,
                std::optional<std::string> kind) {
                 return launch(std::move(done),
                               holding(self.ptr, self.ptr->dispose(key_from(key), std::move(kind))),
                               failure_to);
             })
        .def("dispose_scope",
             [](RouterHandle& self, py::object done, std::string scope, std::string thread) {
                 return purge_to(holding(self.ptr, self.ptr->dispose_scope(std::move(scope),
                                                                           std::move(thread))),
                                 std::move(done));
             })
        .def("dispose_kind", [](RouterHandle& self, py::object done, const py::tuple& key,
                                std::string kind, double timeout) {
            return launch(std::move(done),
                          holding(self.ptr, self.ptr->dispose_kind(key_from(key), std::move(kind),
                                                                   Seconds{timeout})),
                          [](bool disposed) -> py::object { return py::bool_(disposed); });
        });

    py::class_<SandboxHandle, std::shared_ptr<SandboxHandle>>(module, "Sandbox")
        .def_property_readonly("base_directory",
                               [](const SandboxHandle& self) { return self.ptr->base_directory(); })
        .def_property_readonly("replaced",
                               [](const SandboxHandle& self) -> py::object {
                                   const auto& replaced = self.ptr->replaced();
                                   if (!replaced) {
                                       return py::none();
                                   }
                                   return py::make_tuple(replaced->previous_id, replaced->reason);
                               })
        .def("exec",
             [](SandboxHandle& self, py::object done, const py::object& command,
                std::string working_directory, double timeout,
                std::map<std::string, std::string> environment, py::bytes stdin_bytes,
                std::optional<std::uint64_t> max_output) {
                 auto request =
                     exec_request_from(command, std::move(working_directory), timeout,
                                       std::move(environment), std::move(stdin_bytes), max_output);
                 return launch(
                     std::move(done), holding(self.ptr, self.ptr->exec(std::move(request))),
                     [](ExecResult result) -> py::object {
                         return py::make_tuple(py::bytes(result.stdout_bytes),
                                               py::bytes(result.stderr_bytes), result.exit_code);
                     });
             })
        .def("write_file",
             [](SandboxHandle& self, py::object done, std::string path, py::bytes content,
                std::string working_directory) {
                 return launch(
                     std::move(done),
                     holding(self.ptr, self.ptr->write_file(std::move(path), std::string(content),
                                                            std::move(working_directory))),
                     nothing);
             })
        .def("read_file",
             [](SandboxHandle& self, py::object done, std::string path,
                std::string working_directory, std::uint64_t max_bytes) {
                 return launch(std::move(done),
                               holding(self.ptr, self.ptr->read_file(std::move(path),
                                                                     std::move(working_directory),
                                                                     max_bytes)),
                               [](std::string bytes) -> py::object { return py::bytes(bytes); });
             })
        .def("stat_file",
             [](SandboxHandle& self, py::object done, std::string path,
                std::string working_directory) {
                 return launch(std::move(done),
                               holding(self.ptr, self.ptr->stat_file(std::move(path),
                                                                     std::move(working_directory))),
                               [](std::optional<SandboxEntry> entry) -> py::object {
                                   return entry ? entry_to(*entry) : py::none();
                               });
             })
        .def("list_dir",
             [](SandboxHandle& self, py::object done, std::string path,
                std::string working_directory) {
                 return launch(std::move(done),
                               holding(self.ptr, self.ptr->list_dir(std::move(path),
                                                                    std::move(working_directory))),
                               [](std::vector<SandboxEntry> entries) -> py::object {
                                   py::list listed;
                                   for (const auto& entry : entries) {
                                       listed.append(entry_to(entry));
                                   }
                                   return listed;
                               });
             })
        .def("remove", [](SandboxHandle& self, py::object done, std::string path,
                          std::string working_directory, bool recursive) {
            return launch(
                std::move(done),
                holding(self.ptr,
                        self.ptr->remove(std::move(path), std::move(working_directory), recursive)),
                nothing);
        });
}

}  // namespace maf_sandbox::python

PYBIND11_MODULE(_native, module) {
    maf_sandbox::python::define_module(module);
}
