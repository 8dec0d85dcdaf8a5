/*
 * layout/keys.h - fixed-width big-endian keys of each key family, so that
 * LMDB's byte order is numeric order and one cluster is one key range.
 */
#ifndef VF_KEYS_H
#define VF_KEYS_H

#include <stdint.h>
#include <string.h>

static inline void vf_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}
static inline void vf_be32(uint8_t *p, uint32_t v)
{
	for (int i = 3; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}
static inline uint64_t vf_rd_be64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}
static inline uint32_t vf_rd_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* records: id; changes: seq */
typedef struct { uint8_t b[8]; } vf_key64;
static inline vf_key64 vf_key_u64(uint64_t v)
{
	vf_key64 k;
	vf_be64(k.b, v);
	return k;
}

/* gens family: gen | kind | sub */
enum { VF_GK_META = 0, VF_GK_CENTROIDS = 1, VF_GK_ASSIGN = 2, VF_GK_CALIB = 3,
       VF_GK_CENTER = 4 };
typedef struct { uint8_t b[17]; } vf_genkey;
static inline vf_genkey vf_gen_key(uint64_t gen, uint8_t kind, uint64_t sub)
{
	vf_genkey k;
	vf_be64(k.b, gen);
	k.b[8] = kind;
	vf_be64(k.b + 9, sub);
	return k;
}

/* postings family: gen | cluster | kind | sub.  Kinds sort in scan order:
 * the manifest, then tombstones (needed before the postings they kill),
 * then packed blocks, then delta postings appended after them. */
enum {
	VF_PK_MANIFEST = 0, /* sub 0: vf_manifest */
	VF_PK_TOMB = 1,     /* sub id: u64 seq, postings of id below it are dead */
	VF_PK_BLOCK = 2,    /* sub block number: posting block */
	VF_PK_DELTA = 3     /* sub seq: one delta posting */
};
typedef struct { uint8_t b[21]; } vf_postkey;
static inline vf_postkey vf_post_key(uint64_t gen, uint32_t cluster,
				     uint8_t kind, uint64_t sub)
{
	vf_postkey k;
	vf_be64(k.b, gen);
	vf_be32(k.b + 8, cluster);
	k.b[12] = kind;
	vf_be64(k.b + 13, sub);
	return k;
}
static inline uint64_t vf_postkey_gen(const uint8_t *p) { return vf_rd_be64(p); }
static inline uint32_t vf_postkey_cluster(const uint8_t *p) { return vf_rd_be32(p + 8); }
static inline uint8_t vf_postkey_kind(const uint8_t *p) { return p[12]; }
static inline uint64_t vf_postkey_sub(const uint8_t *p) { return vf_rd_be64(p + 13); }

#endif
