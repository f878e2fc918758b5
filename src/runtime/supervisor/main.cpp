// maf-sandbox-supervisor: the resident PID 1 of one sandbox (see supervisor.hpp).
#include "supervisor.hpp"

int main(int argc, char** argv) {
    return maf_sandbox::runtime::supervisor_main(argc, argv);
}
