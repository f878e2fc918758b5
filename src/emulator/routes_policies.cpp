// A sandbox's policies: POST lifecycle and POST egressPolicy each replace the whole policy, which
// is checked field by field first (it is stored and echoed by every later GET and list).
#include "body_checks.hpp"
#include "field_support.hpp"
#include "routes.hpp"
#include "wire_format.hpp"

namespace maf_sandbox::emulator {

net::HttpResponse serve_policy(const RouteContext& context) {
    const auto body = parse_object_body(context.request().body, false);
    if (context.route().endpoint == Endpoint::sandbox_lifecycle) {
        refuse_unsupported_lifecycle_fields(body, "");
        check_lifecycle(body, "");
        return json_response(200, context.service.set_lifecycle(context.id(), body));
    }
    refuse_unsupported_egress_fields(body, "");
    check_egress_policy(body, "");
    return json_response(200, context.service.set_egress_policy(context.id(), body));
}

}  // namespace maf_sandbox::emulator
