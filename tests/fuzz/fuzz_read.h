/*
 * tests/fuzz/fuzz_read.h - read every byte of what a decoder returned, so
 * the address sanitizer sees a read past the value it was given.
 */
#ifndef VECFS_FUZZ_READ_H
#define VECFS_FUZZ_READ_H

#include <stddef.h>
#include <stdint.h>

extern volatile uint64_t fz_sink; /* what was read, so reads are kept */
volatile uint64_t fz_sink;

static inline void fz_read(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t s = 0;
	for (size_t i = 0; i < n; i++)
		s += b[i];
	fz_sink += s;
}

#endif
