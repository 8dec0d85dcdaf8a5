/*
 * engine/math/rotation.h - a random orthogonal rotation in O(D log D).  The input
 * is zero-padded to pdim (a multiple of 64, at least 64), then VF_ROT_ROUNDS
 * times: flip signs by a seeded random diagonal, apply the normalized fast
 * Walsh-Hadamard transform.  When pdim is not a power of two the transform
 * runs on two windows of the largest power of two below it, the first
 * pdim and the last pdim coordinates overlapping (each window with signs
 * of its own), so that a 768-dimensional vector is coded in 768 dimensions
 * rather than 1,024.  Only the seed is stored (and pdim, in the
 * generation's meta: generations made when pdim was always a power of two
 * keep theirs).
 */
#ifndef VF_ROTATION_H
#define VF_ROTATION_H

#include <stdint.h>

#define VF_ROT_ROUNDS 4

typedef struct vf_rotation {
	uint32_t dim, pdim;
	uint32_t win;   /* the transform's length: pdim, or the largest power
			 * of two below it (two windows a round) */
	uint64_t seed;
	float *signs;   /* +1/-1: VF_ROT_ROUNDS * pdim, or * (pdim + win): a
			 * round's pdim, then the second window's win, which
			 * over the coordinates past the first window hold
			 * the product of both */
} vf_rotation;

/* The padded dimension of new generations: the smallest multiple of 64 at
 * or above dim (64 at least). */
uint32_t vf_padded_dim(uint32_t dim);
/* pdim: the generation's (a multiple of 64, >= dim); -EINVAL if not. */
int vf_rotation_init(vf_rotation *r, uint32_t dim, uint32_t pdim, uint64_t seed);
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
