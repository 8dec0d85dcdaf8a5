/*
 * tests/fuzz/fuzz_common.h - what the libFuzzer targets share: a temporary
 * store with an unmounted daemon context over it (made once per process),
 * and the split plan that cuts an input into write() pieces.
 */
#ifndef VECFS_FUZZ_COMMON_H
#define VECFS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "../../fs/daemon.h"

/* The process's daemon context over a fresh temporary store (default
 * configuration but auto_build and background maintenance off; dim as
 * given, 0 to leave it unset).  Removed at exit. */
fs_daemon *fz_daemon(uint32_t dim);
/* Start the store over: empty, same configuration. */
void fz_store_reset(void);
/* Start the store over (empty, same configuration) when records were
 * committed since it was made or last started over. */
void fz_store_reset_if_used(void);

/* Write pieces: the input's first byte b says how many plan bytes follow
 * (b % 8); each plan byte p gives a piece of 1 + p bytes, in turn; no plan
 * bytes: the whole rest in one piece. */
typedef struct fz_split {
	const uint8_t *plan;
	size_t nplan, next;
	const uint8_t *data;
	size_t len, off;
} fz_split;

void fz_split_init(fz_split *s, const uint8_t *in, size_t n);
/* The next piece (its length in *len), or NULL at the end. */
const uint8_t *fz_split_next(fz_split *s, size_t *len);

#endif
