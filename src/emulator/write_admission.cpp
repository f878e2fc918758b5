#include "write_admission.hpp"

#include <boost/asio/this_coro.hpp>

#include "bearer_token.hpp"
#include "refusal.hpp"
#include "routing.hpp"
#include "wire_format.hpp"

namespace maf_sandbox::emulator {

net::BodyAdmitter file_write_admission(std::optional<std::string> token,
                                       std::shared_ptr<ByteBudget> budget) {
    return [token = std::move(token), budget = std::move(budget)](
               const net::HttpRequest& head,
               std::optional<std::uint64_t> content_length) -> Task<net::BodyAdmission> {
        if (route_request(head.method, head.target).endpoint != Endpoint::files_write) {
            co_return net::BodyAdmission{};
        }
        net::BodyAdmission admission;
        if (!bearer_authorized(head.headers.get("authorization"), token)) {
            admission.refusal = problem_response(
                Refusal{401, "Unauthorized",
                        "A valid bearer token for https://dynamicsessions.io is required."});
            co_return admission;
        }
        if (!content_length) {
            admission.refusal = problem_response(
                Refusal{411, "LengthRequired",
                        "A file write must declare its size in Content-Length; a chunked body is "
                        "not accepted."});
            co_return admission;
        }
        try {
            const auto executor = co_await boost::asio::this_coro::executor;
            auto hold = co_await budget->take(executor, *content_length);
            admission.hold = std::make_shared<ByteBudget::Hold>(std::move(hold));
        } catch (const Refusal& refusal) {
            admission.refusal = problem_response(refusal);
        }
        co_return admission;
    };
}

}  // namespace maf_sandbox::emulator
