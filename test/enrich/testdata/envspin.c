// SPDX-License-Identifier: Apache-2.0
//
// envspin: a CPU-bound process that publishes nothing; what names it is its
// environment (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), set by the
// test. Prints "ready" and spins until killed.
#include <stdio.h>

int main(void) {
	printf("ready\n");
	fflush(stdout);
	volatile unsigned long n = 0;
	for (;;)
		n++;
}
