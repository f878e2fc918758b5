// The README's main job: an agent's Python program runs through the router in a sandbox, reads a
// CSV the host put in its file store, and its declared outputs (a JSON summary and an SVG chart)
// land in ./demo-out/. Then the conversation is purged and the service is asked what it still
// holds. Prints a short transcript with timings.
#include <unistd.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>

#include "demo_backends.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/outputs.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/kinds/codeact.hpp"

namespace {

namespace ms = maf_sandbox;
using Clock = std::chrono::steady_clock;

constexpr const char* kSalesCsv =
    "region,quarter,revenue\n"
    "north,Q1,120\nnorth,Q2,135\nnorth,Q3,150\nnorth,Q4,171\n"
    "south,Q1,90\nsouth,Q2,88\nsouth,Q3,97\nsouth,Q4,110\n"
    "east,Q1,60\neast,Q2,79\neast,Q3,85\neast,Q4,92\n"
    "west,Q1,140\nwest,Q2,128\nwest,Q3,133\nwest,Q4,149\n";

// What the "model" wrote: standard library only, so any image with python3 runs it.
constexpr const char* kAnalysis = R"PY(import csv, json
totals = {}
with open("sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        totals[row["region"]] = totals.get(row["region"], 0) + int(row["revenue"])
best = max(totals, key=totals.get)
with open("summary.json", "w") as f:
    json.dump({"totals": totals, "best_region": best, "grand_total": sum(totals.values())}, f,
              indent=2, sort_keys=True)
width, bar = 400, 40
top = max(totals.values())
rows = []
for i, (region, total) in enumerate(sorted(totals.items())):
    w = int(300 * total / top)
    y = 20 + i * (bar + 10)
    rows.append(f'<rect x="90" y="{y}" width="{w}" height="{bar}" fill="#4a7ab5"/>'
                f'<text x="10" y="{y + 25}">{region}</text>'
                f'<text x="{95 + w}" y="{y + 25}">{total}</text>')
height = 30 + len(totals) * (bar + 10)
with open("chart.svg", "w") as f:
    f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 60}" height="{height}">'
            + "".join(rows) + "</svg>\n")
print(f"analysed {sum(1 for _ in open('sales.csv')) - 1} rows; best region: {best} ({totals[best]})")
)PY";

struct Options {
    ms::demo::DemoBackendOptions backend;
    std::string out_dir = "demo-out";
};

Options parse(int argc, char** argv) {
    Options options;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                throw ms::InvalidArgument(arg + " needs a value");
            }
            return argv[++i];
        };
        if (arg == "--backend") {
            options.backend.backend = value();
        } else if (arg == "--endpoint") {
            options.backend.endpoint = value();
        } else if (arg == "--ca-file") {
            options.backend.ca_file = value();
        } else if (arg == "--token") {
            options.backend.token = value();
        } else if (arg == "--state-dir") {
            options.backend.state_dir = value();
        } else if (arg == "--out-dir") {
            options.out_dir = value();
        } else {
            throw ms::InvalidArgument("unknown option " + arg +
                                      "; use --backend acas|local, --endpoint, --ca-file, --token, "
                                      "--state-dir, --out-dir");
        }
    }
    return options;
}

class Transcript {
  public:
    void step(const std::string& what) {
        const auto now = Clock::now();
        const auto ms_elapsed = std::chrono::duration<double, std::milli>(now - last_).count();
        std::cout << fmt::format("[{:8.1f} ms] {}\n", ms_elapsed, what) << std::flush;
        last_ = now;
    }

  private:
    Clock::time_point last_ = Clock::now();
};

std::string random_thread() {
    std::random_device device;
    return fmt::format("demo-{:08x}", device());
}

ms::Task<int> run(const Options& options, std::shared_ptr<spdlog::logger> log) {
    Transcript transcript;
    const std::string scope = "demo";
    const std::string thread = random_thread();

    auto backend = co_await ms::demo::make_demo_backend(options.backend, scope, thread);
    transcript.step(fmt::format("backend '{}' ready; it declares isolation '{}'",
                                backend.backend->name(),
                                ms::to_string(backend.backend->isolation())));

    ms::SandboxRouterOptions router_options;
    // The router's default floor is microvm; this machine has no hypervisor, so the demo's own
    // config lowers it to container, and says so.
    router_options.min_isolation = ms::Isolation::container;
    router_options.log = log;
    auto router = std::make_shared<ms::SandboxRouter>(
        std::vector<std::shared_ptr<ms::SandboxBackend>>{backend.backend}, router_options);
    transcript.step("router floor set to 'container' by the demo's config (default: microvm)");

    const auto store_dir = std::filesystem::temp_directory_path() / ("maf-demo-store-" + thread);
    std::filesystem::create_directories(store_dir);
    std::ofstream(store_dir / "sales.csv", std::ios::binary) << kSalesCsv;
    auto store = std::make_shared<const ms::kinds::FileStore>(store_dir);
    std::filesystem::create_directories(options.out_dir);

    ms::kinds::CodeActConfig config;
    config.sandbox.image = "host";
    config.sandbox.timeout = ms::Seconds(60);
    for (const char* name : {"summary.json", "chart.svg"}) {
        ms::DeclaredOutput output;
        output.path = name;
        config.outputs.push_back(output);
    }
    ms::kinds::CodeActTool tool(router, config, store, ms::make_file_system_sink(options.out_dir),
                                log);
    const auto provenance = tool.provenance();
    transcript.step(fmt::format("codeact attached: backend {}, isolation {}, egress {}",
                                provenance.backend, ms::to_string(provenance.isolation),
                                ms::to_string(provenance.egress)));

    ms::kinds::CallerContext caller{scope, thread, "demo-agent", nullptr, {}, std::nullopt};
    // Named first: g++ 12 miscompiles braced temporaries inside a co_await expression.
    ms::kinds::CodeActArguments arguments;
    arguments.code = kAnalysis;
    arguments.input_files.push_back("sales.csv");
    const auto result = co_await tool.execute_code(caller, std::move(arguments));
    int status = 0;
    if (result.failure != ms::kinds::CallFailure::none) {
        std::cout << "the call failed: " << result.message << "\n";
        status = 1;
    } else {
        transcript.step("program ran; exit code " + std::to_string(result.program->exit_code));
        std::cout << "  stdout: " << result.program->stdout_text;
        for (const auto& landed : result.landed) {
            std::cout << "  landed: " << options.out_dir << "/" << landed << "\n";
        }
        status = result.program->exit_code == 0 ? 0 : 1;
    }

    transcript.step(backend.backend->declarations().declares(ms::Capability::reclaim)
                        ? "the call's directory was reclaimed; the sandbox stays warm for the "
                          "conversation"
                        : "the backend withholds reclaim, so the call's cleanup disposed its "
                          "sandbox");
    const auto purge = co_await router->dispose_scope(scope, thread);
    transcript.step(fmt::format("conversation purged: {} sandbox(es) disposed{}", purge.disposed,
                                purge.undisposed ? " (some could not be)" : ""));
    const auto remaining = co_await backend.count_remaining();
    transcript.step(
        fmt::format("the service holds {} sandbox(es) for this conversation", remaining));
    co_await backend.backend->close();
    std::filesystem::remove_all(store_dir);
    co_return remaining == 0 ? status : 1;
}

}  // namespace

int main(int argc, char** argv) {
    auto log = spdlog::stderr_color_mt("demo");
    log->set_pattern("%^%l%$: %v");
    log->set_level(spdlog::level::warn);
    try {
        const auto options = parse(argc, argv);
        return ms::run_blocking(run(options, log));
    } catch (const ms::InvalidArgument& e) {
        log->error("{}", e.what());
        return 2;
    } catch (const ms::Error& e) {
        log->error("{}: {}", e.type_name(), e.what());
        return 1;
    }
}
