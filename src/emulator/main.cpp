#include "maf_sandbox/emulator/emulator.hpp"

int main(int argc, char** argv) {
    return maf_sandbox::emulator::emulator_main(argc, argv);
}
