// The one assertion the fuzz targets use: a broken property aborts with a message, which libFuzzer
// reports as a crash and saves the input that caused it.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace maf_sandbox::fuzz {

inline void require(bool holds, std::string_view property, std::string_view detail = {}) {
    if (!holds) {
        std::fprintf(stderr, "fuzz property broken: %.*s\n  %.*s\n",
                     static_cast<int>(property.size()), property.data(),
                     static_cast<int>(detail.size()), detail.data());
        std::abort();
    }
}

}  // namespace maf_sandbox::fuzz
