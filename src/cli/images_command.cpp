// `maf-sandbox images list|import|rm`: the local runtime's image store (state directory from
// MAF_SANDBOX_STATE_DIR, default /var/lib/maf-sandbox), or with `--backend acas` the sandbox
// group's images: the prebuilt catalogue and the imported disk images (the README's
// import_disk_image script).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "backends.hpp"
#include "cli.hpp"
#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/runtime/host/images.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"
#include "option_parsing.hpp"

namespace maf_sandbox::cli {
namespace {

constexpr const char* kLocal = "local";
constexpr const char* kAcas = "acas";

struct ImagesOptions {
    std::string backend = kLocal;
    bool json = false;
    std::string archive;
    std::string name;
    std::string remove_ref;
    double timeout = 600.0;
    runtime::ImportLimits limits;
    BackendOptions backend_options;
};

void require_known_backend(const ImagesOptions& options) {
    if (options.backend != kLocal && options.backend != kAcas) {
        throw InvalidArgument(
            fmt::format("--backend {} has no images here; use --backend local or --backend acas",
                        options.backend));
    }
}

std::shared_ptr<acas::AcasBackend> open_acas(const ImagesOptions& options) {
    return std::dynamic_pointer_cast<acas::AcasBackend>(
        make_backend(kAcas, options.backend_options));
}

// Runs one backend call on an io_context that also closes the backend (never its sandboxes).
template <typename T>
T with_acas(const ImagesOptions& options, std::function<Task<T>(acas::AcasBackend&)> call) {
    auto backend = open_acas(options);
    boost::asio::io_context io;
    std::optional<T> result;
    std::exception_ptr failure;
    try {
        result.emplace(run_blocking(io, call(*backend)));
    } catch (...) {
        failure = std::current_exception();
    }
    try {
        run_blocking(io, backend->close());
    } catch (const std::exception&) {
        // Nothing was left running; a close failure cannot change the answer.
    }
    if (failure)
        std::rethrow_exception(failure);
    return std::move(*result);
}

void list_acas_images(const ImagesOptions& options) {
    const auto images = with_acas<acas::AcasBackend::Images>(
        options, [](acas::AcasBackend& backend) { return backend.list_images(); });
    if (options.json) {
        boost::json::array prebuilt;
        for (const auto& name : images.prebuilt)
            prebuilt.emplace_back(name);
        boost::json::array imported;
        for (const auto& image : images.imported) {
            imported.push_back(boost::json::object{{"id", image.id},
                                                   {"name", image.name},
                                                   {"base", image.base},
                                                   {"state", image.state}});
        }
        std::cout << boost::json::serialize(boost::json::object{{"prebuilt", std::move(prebuilt)},
                                                                {"imported", std::move(imported)}})
                  << "\n";
        return;
    }
    std::cout << fmt::format("{:<48} {:<9} {:<10} {}\n", "IMAGE", "KIND", "STATE", "ID");
    for (const auto& name : images.prebuilt)
        std::cout << fmt::format("{:<48} {:<9} {:<10} {}\n", name, "prebuilt", "Ready", "-");
    for (const auto& image : images.imported) {
        std::cout << fmt::format("{:<48} {:<9} {:<10} {}\n", image.base, "imported", image.state,
                                 image.id);
    }
}

void import_acas_image(const ImagesOptions& options) {
    const auto imported = with_acas<acas::AcasBackend::ImportedImage>(
        options, [&options](acas::AcasBackend& backend) {
            return backend.import_disk_image(options.archive, options.name,
                                             Seconds{options.timeout});
        });
    std::cout << fmt::format(
        "{}: {}\n", imported.already_imported ? "already imported" : "imported", imported.image.id);
}

void list_images(const ImagesOptions& options) {
    runtime::ImageStore store(runtime::default_state_dir());
    const auto images = store.list();
    if (options.json) {
        boost::json::array out;
        for (const auto& image : images) {
            out.push_back(boost::json::object{{"name", image.ref.name},
                                              {"tag", image.ref.tag},
                                              {"ref", image.ref.str()},
                                              {"builtin", image.builtin},
                                              {"source", image.source},
                                              {"user", image.user},
                                              {"workdir", image.workdir}});
        }
        std::cout << boost::json::serialize(out) << "\n";
        return;
    }
    std::cout << fmt::format("{:<40} {:<16} {:<12} {}\n", "IMAGE", "SOURCE", "USER", "WORKDIR");
    for (const auto& image : images) {
        std::cout << fmt::format("{:<40} {:<16} {:<12} {}\n", image.ref.str(), image.source,
                                 image.user.empty() ? "root" : image.user, image.workdir);
    }
}

void import_image(const ImagesOptions& options) {
    runtime::ImageStore store(runtime::default_state_dir());
    const auto info = store.import(options.archive, options.name, options.limits);
    std::cout << fmt::format("imported {} ({}) from {}\n", info.ref.str(), info.source,
                             options.archive);
}

void remove_image(const ImagesOptions& options) {
    const auto ref = runtime::parse_image_ref(options.remove_ref);
    // A live sandbox's overlay still reads this image: refuse rather than pull it from under it.
    runtime::Registry registry(runtime::default_state_dir());
    for (const auto& record : registry.list()) {
        if (record.image == ref.str() && runtime::Registry::is_alive(record)) {
            throw InvalidArgument(
                fmt::format("image '{}' is in use by sandbox {}; remove the sandbox first "
                            "(`maf-sandbox rm {}`)",
                            ref.str(), record.id, record.id));
        }
    }
    runtime::ImageStore store(runtime::default_state_dir());
    store.remove(ref.str());
    std::cout << fmt::format("removed {}\n", ref.str());
}

}  // namespace

void add_images_command(CLI::App& app, Context& context) {
    auto options = std::make_shared<ImagesOptions>();
    auto* images = app.add_subcommand(
        "images",
        "Manage images: the local runtime's (the built-in `host` and imported ones), or with "
        "--backend acas the sandbox group's");
    images->require_subcommand(1);

    auto* list_command = images->add_subcommand("list", "List images");
    list_command->add_option("--backend", options->backend, "local (default) or acas");
    list_command->add_flag("--json", options->json, "Print JSON");
    add_backend_options(*list_command, options->backend_options);
    list_command->callback([options] {
        require_known_backend(*options);
        if (options->backend == kAcas) {
            list_acas_images(*options);
        } else {
            list_images(*options);
        }
    });

    auto* import_command = images->add_subcommand(
        "import",
        "Import a root filesystem tarball, a `docker save` archive or an OCI layout (local); with "
        "--backend acas, build a disk image from REPO:TAG (qualified by --registry), poll it "
        "until Ready and print its id");
    import_command
        ->add_option("ARCHIVE", options->archive, "The archive to import, or REPO:TAG for acas")
        ->required();
    import_command->add_option(
        "--name", options->name,
        "NAME:TAG to store it as (local, required); the disk image's name (acas)");
    import_command->add_option("--backend", options->backend, "local (default) or acas");
    import_command
        ->add_option("--timeout", options->timeout,
                     "How long to wait for Ready (acas, default 10m; seconds, or 90s, 10m)")
        ->transform(duration());
    import_command
        ->add_option("--max-bytes", options->limits.max_bytes,
                     "Refuse an import that writes more than this into the store, staged layers "
                     "included (local, default 16G)")
        ->transform(byte_size());
    import_command->add_option("--max-entries", options->limits.max_entries,
                               "Refuse an archive with more entries than this (local, default "
                               "1000000)");
    import_command->add_option("--max-depth", options->limits.max_depth,
                               "Refuse an entry nested deeper than this many path components "
                               "(local, default 256)");
    import_command
        ->add_option("--min-free-percent", options->limits.min_free_percent,
                     "Stop an import before the store's filesystem has less than this share of "
                     "its bytes or inodes free (local, default 5)")
        ->check(CLI::Range(0, 100));
    add_backend_options(*import_command, options->backend_options);
    import_command->callback([options] {
        require_known_backend(*options);
        if (options->backend == kAcas) {
            import_acas_image(*options);
            return;
        }
        if (options->name.empty()) {
            throw InvalidArgument("--name NAME:TAG is required to import into the local store");
        }
        import_image(*options);
    });

    auto* rm_command = images->add_subcommand("rm", "Remove an imported image (local)");
    rm_command->add_option("IMAGE", options->remove_ref, "NAME:TAG")->required();
    rm_command->callback([options] { remove_image(*options); });
    (void)context;
}

}  // namespace maf_sandbox::cli
