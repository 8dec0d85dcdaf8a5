/*
 * layout/checksum.h - XXH3 checksums of stored columns, and a cache of
 * column images already verified so a hot query does not hash the same
 * immutable bytes again.  (LMDB pages are copy-on-write: a committed page
 * never changes while it can be read, and a rewritten column carries a new
 * checksum, so a verified (address, length, checksum) stays valid.)
 */
#ifndef VF_CHECKSUM_H
#define VF_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

uint64_t vf_checksum(const void *p, size_t len);

#define VF_VCACHE_SLOTS (1u << 18) /* two-way: a tag lives in slot s or s^1 */
typedef struct vf_vcache {
	uint64_t tag[VF_VCACHE_SLOTS]; /* accessed atomically */
} vf_vcache;

/* 0 if the bytes match `sum` (cached or hashed now), -EIO otherwise.
 * `cache` may be NULL (always hash). */
int vf_verify(vf_vcache *cache, const void *p, size_t len, uint64_t sum);
/* Start fetching the cache slot vf_verify() of the same bytes will read: a
 * random place in the cache's 2 MiB, a miss when it is called at once. */
void vf_verify_prefetch(const vf_vcache *cache, const void *p, size_t len, uint64_t sum);

#endif
