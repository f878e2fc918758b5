#include "maf_sandbox/core/error_detail.hpp"

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox {

std::string error_detail(const std::exception_ptr& error) {
    try {
        std::rethrow_exception(error);
    } catch (const Error& e) {
        return fmt::format("{}: {}", e.type_name(), e.what());
    } catch (const std::exception& e) {
        return e.what();
    } catch (...) {
        return "an exception of unknown type";
    }
}

}  // namespace maf_sandbox
