/*
 * layout/checksum.c - XXH3 checksums and the verified-column cache.
 */
#include "checksum.h"

#include <errno.h>
#include <xxhash.h>

uint64_t vf_checksum(const void *p, size_t len)
{
	return XXH3_64bits(p, len);
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* The cache tag of (p, len, sum): never 0, the empty slot's. */
static inline uint64_t tag_of(const void *p, size_t len, uint64_t sum)
{
	return mix((uint64_t)(uintptr_t)p ^ mix(sum ^ len)) | 1;
}

void vf_verify_prefetch(const vf_vcache *cache, const void *p, size_t len, uint64_t sum)
{
	if (cache) /* slots s and s^1 share a cache line */
		__builtin_prefetch(&cache->tag[tag_of(p, len, sum) % VF_VCACHE_SLOTS]);
}

int vf_verify(vf_vcache *cache, const void *p, size_t len, uint64_t sum)
{
	uint64_t tag = 0;
	size_t slot = 0;
	if (cache) {
		tag = tag_of(p, len, sum);
		slot = tag % VF_VCACHE_SLOTS;
		if (__atomic_load_n(&cache->tag[slot], __ATOMIC_RELAXED) == tag ||
		    __atomic_load_n(&cache->tag[slot ^ 1], __ATOMIC_RELAXED) == tag)
			return 0;
	}
	if (XXH3_64bits(p, len) != sum)
		return -EIO;
	if (cache) {
		/* keep the newer tag in the first slot, move the older aside */
		uint64_t old = __atomic_exchange_n(&cache->tag[slot], tag, __ATOMIC_RELAXED);
		__atomic_store_n(&cache->tag[slot ^ 1], old, __ATOMIC_RELAXED);
	}
	return 0;
}
