/* main.c: placeholder */
#include "fmhpc/core.h"
int main(void) { return 0; }
