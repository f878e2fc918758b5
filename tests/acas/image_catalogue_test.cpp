// The image catalogue's invariants: names and ids are learned from the service once, and the
// removal probe's image hint is written only in probe order and never served past its lifetime.
#include <gtest/gtest.h>

#include "fake_service.hpp"
#include "image_catalogue.hpp"
#include "maf_sandbox/azure/credentials.hpp"

namespace maf_sandbox::acas {
namespace {

using maf_sandbox::testing::drive;

TEST(ImageCatalogue, AProbeThatStartedEarlierNeverOverwritesALaterProbesVerdict) {
    ImageCatalogue images("reg.example.io", Seconds{60.0});
    const auto older = images.start_probe();
    const auto newer = images.start_probe();
    EXPECT_GT(newer, older);
    images.record_verdict("prebuilt:ubuntu", newer, /*refused=*/false);
    images.record_verdict("prebuilt:ubuntu", older, /*refused=*/true);  // answered last
    EXPECT_FALSE(images.hint_refuses("prebuilt:ubuntu"));

    images.record_verdict("prebuilt:python-3.13", older, true);
    EXPECT_TRUE(images.hint_refuses("prebuilt:python-3.13"));
    images.record_verdict("prebuilt:python-3.13", newer, false);  // a later probe overrides
    EXPECT_FALSE(images.hint_refuses("prebuilt:python-3.13"));
    // A sandbox adopted from the service has no known image: nothing is recorded.
    images.record_verdict("", newer, true);
    EXPECT_FALSE(images.hint_refuses(""));
}

TEST(ImageCatalogue, AnExpiredHintIsNeverServed) {
    ImageCatalogue images("reg.example.io", Seconds{0.0});
    images.record_verdict("prebuilt:ubuntu", images.start_probe(), true);
    EXPECT_FALSE(images.hint_refuses("prebuilt:ubuntu"));
    ImageCatalogue lasting("reg.example.io", Seconds{3600.0});
    lasting.record_verdict("prebuilt:ubuntu", lasting.start_probe(), true);
    EXPECT_TRUE(lasting.hint_refuses("prebuilt:ubuntu"));
    EXPECT_TRUE(lasting.hint_refuses("prebuilt:ubuntu"));  // serving it does not consume it
}

struct Service {
    testing::FakeAcasService fake;
    boost::asio::io_context io;
    AcasClient client() {
        AcasClientOptions o;
        o.endpoint = fake.endpoint();
        o.subscription_id = "sub";
        o.resource_group = "rg";
        o.sandbox_group = "grp";
        o.ca_file = fake.ca_file();
        o.credential = azure::make_static_token_credential("test-token");
        return AcasClient(io.get_executor(), std::move(o));
    }
};

SandboxSpec image_spec(std::string image) {
    SandboxSpecFields f;
    f.kind = "shell";
    f.image = std::move(image);
    return SandboxSpec(f);
}

TEST(ImageCatalogue, ACatalogueNameOrAnImportedImageIsAskedOfTheServiceOnce) {
    Service service;
    auto client = service.client();
    ImageCatalogue images("reg.example.io", Seconds{60.0});
    const auto deadline = deadline_after(Seconds{20.0});
    for (int i = 0; i < 2; ++i) {
        const auto prebuilt =
            drive(service.io, images.resolve(client, image_spec("ubuntu"), deadline));
        EXPECT_EQ(prebuilt.prebuilt_name, "ubuntu");
        EXPECT_EQ(source_key(prebuilt), "prebuilt:ubuntu");
        const auto imported =
            drive(service.io, images.resolve(client, image_spec("tool:1.0"), deadline));
        EXPECT_EQ(imported.disk_image_id, "img-1");
        EXPECT_EQ(source_key(imported), "disk:img-1");
    }
    EXPECT_EQ(service.fake.count("GET", "/diskimages/public"), 1u);
    EXPECT_EQ(service.fake.count("GET", "/diskimages"), 1u);
    EXPECT_TRUE(images.knows_prebuilt("ubuntu"));
    EXPECT_EQ(images.disk_image_of("reg.example.io/tool:1.0"), "img-1");
}

TEST(ImageCatalogue, AnImageTheServiceDoesNotHaveIsRefusedAndNotRemembered) {
    Service service;
    auto client = service.client();
    ImageCatalogue images("reg.example.io", Seconds{60.0});
    const auto deadline = deadline_after(Seconds{20.0});
    try {
        drive(service.io, images.resolve(client, image_spec("fortran"), deadline));
        FAIL() << "an unknown catalogue name was accepted";
    } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("python-3.13"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(images.knows_prebuilt("fortran"));
    EXPECT_THROW(drive(service.io, images.resolve(client, image_spec("never:1"), deadline)),
                 InvalidArgument);
    EXPECT_FALSE(images.disk_image_of("reg.example.io/never:1"));
}

}  // namespace
}  // namespace maf_sandbox::acas
