/*
 * engine/rotation.h - a random orthogonal rotation in O(D log D): the input
 * is zero-padded to pdim (a power of two, at least 64), then
 * VF_ROT_ROUNDS times: flip signs by a seeded random diagonal, apply the
 * normalized fast Walsh-Hadamard transform.  Only the seed is stored.
 */
#ifndef VF_ROTATION_H
#define VF_ROTATION_H

#include <stdint.h>

#define VF_ROT_ROUNDS 4

typedef struct vf_rotation {
	uint32_t dim, pdim;
	uint64_t seed;
	float *signs; /* VF_ROT_ROUNDS * pdim of +1/-1 */
} vf_rotation;

uint32_t vf_padded_dim(uint32_t dim);
int vf_rotation_init(vf_rotation *r, uint32_t dim, uint64_t seed);
void vf_rotation_free(vf_rotation *r);
/* out (pdim floats) = R * [in (dim floats), 0...] */
void vf_rotate(const vf_rotation *r, const float *in, float *out);

/* Deterministic generator used for seeds and sampling. */
static inline uint64_t vf_splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

#endif
