// `maf-sandbox images list|import|rm`: the local runtime's image store (state directory from
// MAF_SANDBOX_STATE_DIR, default /var/lib/maf-sandbox).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <iostream>
#include <memory>
#include <string>

#include "cli.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/images.hpp"
#include "maf_sandbox/runtime/registry.hpp"

namespace maf_sandbox::cli {
namespace {

struct ImagesOptions {
    bool json = false;
    std::string archive;
    std::string name;
    std::string remove_ref;
};

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
    const auto info = store.import(options.archive, options.name);
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
        "images", "Manage the local runtime's images (the built-in `host` and imported ones)");
    images->require_subcommand(1);

    auto* list = images->add_subcommand("list", "List images");
    list->add_flag("--json", options->json, "Print a JSON array");
    list->callback([options] { list_images(*options); });

    auto* import = images->add_subcommand(
        "import", "Import a root filesystem tarball, a `docker save` archive or an OCI layout");
    import->add_option("ARCHIVE", options->archive, "The archive to import")->required();
    import->add_option("--name", options->name, "NAME:TAG to store it as")->required();
    import->callback([options] { import_image(*options);
});

auto* rm = images->add_subcommand("rm", "Remove an imported image");
rm->add_option("IMAGE", options->remove_ref, "NAME:TAG")->required();
rm->callback([options] { remove_image(*options); });
(void)context;
}  // namespace maf_sandbox::cli

}  // namespace maf_sandbox::cli
