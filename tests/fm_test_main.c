/* fm_test_main.c: main() for serial unit-test binaries. */
#include "fm_test.h"

int main(int argc, char **argv) { return fm_test_main(argc, argv); }
