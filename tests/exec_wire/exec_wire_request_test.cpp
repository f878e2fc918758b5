// The interactive fields of an exec request (`interactive`, `tty`, `rows`, `cols`) as the
// supervisor reads them: what a host writes reads back the same, what no host writes is refused
// with a std::exception (which the supervisor's handler catches), and requests from hosts that
// predate the fields read as non-interactive.
#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <string>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/wire/exec_protocol.hpp"

namespace maf_sandbox::runtime {
namespace {

namespace json = boost::json;

// A well-formed request with `extra` members added (or replaced).
json::value request_with(const json::object& extra) {
    ExecCall call;
    call.command = std::vector<std::string>{"python3"};
    auto value = exec_wire::to_json(call);
    for (const auto& [key, member] : extra) {
        value.as_object()[key] = member;
    }
    return value;
}

TEST(ExecWireRequest, ATerminalCallReadsBackWithItsSize) {
    ExecCall call;
    call.command = std::string("sh");
    call.tty = true;
    call.rows = 50;
    call.cols = 132;
    const auto again =
        exec_wire::exec_call_from_json(json::parse(json::serialize(exec_wire::to_json(call))));
    EXPECT_TRUE(again.tty);
    EXPECT_TRUE(again.interactive);
    EXPECT_EQ(again.rows, 50);
    EXPECT_EQ(again.cols, 132);
}

TEST(ExecWireRequest, AnInteractiveCallWithoutATerminalKeepsTheDefaultSize) {
    ExecCall call;
    call.command = std::string("cat");
    call.interactive = true;
    const auto json_value = exec_wire::to_json(call);
    EXPECT_FALSE(json_value.as_object().contains("rows"));
    const auto again = exec_wire::exec_call_from_json(json_value);
    EXPECT_TRUE(again.interactive);
    EXPECT_FALSE(again.tty);
    EXPECT_EQ(again.rows, 24);
    EXPECT_EQ(again.cols, 80);
}

TEST(ExecWireRequest, ANonInteractiveCallCarriesNoneOfTheFieldsAndReadsAsBefore) {
    const auto value = request_with({});
    for (const auto* field : {"interactive", "tty", "rows", "cols"}) {
        EXPECT_FALSE(value.as_object().contains(field)) << field;
    }
    const auto call = exec_wire::exec_call_from_json(value);
    EXPECT_FALSE(call.interactive);
    EXPECT_FALSE(call.tty);
}

TEST(ExecWireRequest, ATerminalImpliesInteractiveEvenWhenTheRequestSaysOtherwise) {
    const auto call = exec_wire::exec_call_from_json(
        request_with({{"interactive", false}, {"tty", true}, {"rows", 10}, {"cols", 20}}));
    EXPECT_TRUE(call.interactive);
}

TEST(ExecWireRequest, ATerminalWithoutItsSizeIsRefused) {
    EXPECT_ANY_THROW(exec_wire::exec_call_from_json(request_with({{"tty", true}})));
    EXPECT_ANY_THROW(exec_wire::exec_call_from_json(request_with({{"tty", true}, {"rows", 24}})));
    EXPECT_ANY_THROW(exec_wire::exec_call_from_json(request_with({{"tty", true}, {"cols", 80}})));
}

TEST(ExecWireRequest, ASizeThatDoesNotFitSixteenBitsIsRefused) {
    for (const auto& bad :
         {json::value(65536), json::value(-1), json::value(1.5), json::value("24"),
          json::value(nullptr), json::value(json::array{24})}) {
        EXPECT_ANY_THROW(exec_wire::exec_call_from_json(
            request_with({{"tty", true}, {"rows", bad}, {"cols", 80}})))
            << json::serialize(bad);
        EXPECT_ANY_THROW(exec_wire::exec_call_from_json(
            request_with({{"tty", true}, {"rows", 24}, {"cols", bad}})))
            << json::serialize(bad);
    }
}

TEST(ExecWireRequest, TheLargestSizeIsTaken) {
    const auto call =
        exec_wire::exec_call_from_json(request_with({{"tty", true}, {"rows", 65535}, {"cols", 0}}));
    EXPECT_EQ(call.rows, 65535);
    EXPECT_EQ(call.cols, 0);
}

TEST(ExecWireRequest, InteractiveOrTtyThatIsNotABooleanIsRefused) {
    for (const auto& bad :
         {json::value("yes"), json::value(1), json::value(nullptr), json::value(json::object{})}) {
        EXPECT_ANY_THROW(exec_wire::exec_call_from_json(request_with({{"interactive", bad}})))
            << json::serialize(bad);
        EXPECT_ANY_THROW(exec_wire::exec_call_from_json(
            request_with({{"tty", bad}, {"rows", 24}, {"cols", 80}})))
            << json::serialize(bad);
    }
}

TEST(ExecWireRequest, ASizeWithoutATerminalIsIgnored) {
    const auto call =
        exec_wire::exec_call_from_json(request_with({{"rows", "junk"}, {"cols", -5}}));
    EXPECT_FALSE(call.tty);
    EXPECT_EQ(call.rows, 24);
}

TEST(ExecWireRequest, ARequestThatIsNotAnObjectIsRefused) {
    for (const auto* text : {"[]", "null", "\"argv\"", "7"}) {
        EXPECT_ANY_THROW(exec_wire::exec_call_from_json(json::parse(text))) << text;
    }
}

TEST(ExecWireConnect, NoSupervisorAtThePathIsAnUnreachableSandbox) {
    EXPECT_THROW(connect_supervisor("/nonexistent-maf-sandbox-dir/exec.sock"),
                 SandboxOutputUnreachable);
}

TEST(ExecWireConnect, APathTooLongForASocketAddressIsRefusedByName) {
    EXPECT_THROW(connect_supervisor("/" + std::string(200, 'a')), InvalidArgument);
}

}  // namespace
}  // namespace maf_sandbox::runtime
