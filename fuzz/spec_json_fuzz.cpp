// parse_spec_json on arbitrary bytes: it accepts or throws InvalidArgument with a one-line message,
// nothing else; an accepted spec re-serialises to JSON that parses back to an equal spec, and
// serialising that again gives the same text (the serialisation is canonical).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/spec_json.hpp"

using maf_sandbox::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    std::optional<maf_sandbox::SandboxSpec> spec;
    try {
        spec = maf_sandbox::parse_spec_json(text);
    } catch (const maf_sandbox::InvalidArgument& e) {
        const std::string_view message = e.what();
        require(!message.empty(), "a refusal says why", message);
        require(message.find('\n') == std::string_view::npos, "a refusal is one line", message);
        return 0;
    }
    const auto first = maf_sandbox::spec_to_json(*spec);
    maf_sandbox::SandboxSpec reparsed = [&] {
        try {
            return maf_sandbox::parse_spec_json(first);
        } catch (const std::exception& e) {
            require(false, "a serialised spec parses back", std::string(e.what()) + " in " + first);
            throw;
        }
    }();
    require(reparsed == *spec, "a serialised spec parses back to an equal spec", first);
    require(maf_sandbox::spec_to_json(reparsed) == first, "serialisation is canonical", first);
    return 0;
}
