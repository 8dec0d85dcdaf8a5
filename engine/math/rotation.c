/*
 * engine/math/rotation.c - randomized Hadamard rotation.
 */
#include "io.h"
#include "rotation.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

uint32_t vf_padded_dim(uint32_t dim)
{
	if (dim <= 64)
		return 64;
	return dim > UINT32_MAX - 63 ? 0 : (dim + 63) / 64 * 64;
}

int vf_rotation_init(vf_rotation *r, uint32_t dim, uint32_t pdim, uint64_t seed)
{
	memset(r, 0, sizeof *r);
	if (pdim < 64 || pdim % 64 || pdim < dim || pdim > (1u << 24))
		return -EINVAL;
	r->dim = dim;
	r->pdim = pdim;
	r->seed = seed;
	r->win = 64;
	while (r->win * 2 <= pdim)
		r->win *= 2;
	/* a power of two: one transform a round, the signs as they always were */
	size_t per = pdim + (r->win == pdim ? 0 : r->win);
	r->signs = vf_malloc(sizeof(float) * VF_ROT_ROUNDS * per);
	if (!r->signs)
		return -ENOMEM;
	uint64_t s = seed ^ 0x726f746174696f6eULL;
	for (size_t i = 0; i < VF_ROT_ROUNDS * per; i++)
		r->signs[i] = (vf_splitmix(&s) >> 63) ? -1.0f : 1.0f;
	/* two windows: the round's signs over the coordinates past the
	 * first window are applied with the second window's own (a product
	 * of signs is exact, so every value is the same float as applying
	 * them one after the other) */
	uint32_t m = r->win, n = pdim;
	for (int k = 0; m != n && k < VF_ROT_ROUNDS; k++) {
		float *sg = r->signs + (size_t)k * per;
		for (uint32_t i = m; i < n; i++)
			sg[n + (i - (n - m))] *= sg[i];
	}
	return 0;
}

void vf_rotation_free(vf_rotation *r)
{
	free(r->signs);
	r->signs = NULL;
}

void vf_rotate(const vf_rotation *r, const float *in, float *out)
{
	const vf_kernels *kn = vf_kernels_get();
	uint32_t n = r->pdim, m = r->win;
	memcpy(out, in, sizeof(float) * r->dim);
	memset(out + r->dim, 0, sizeof(float) * (n - r->dim));
	if (m == n) {
		kn->rotate_rounds(out, n, r->signs, VF_ROT_ROUNDS, 1.0f / sqrtf((float)n));
		return;
	}
	/* a round: signs over all n (the first window's with its transform),
	 * the first m transformed, then the last m with signs of their own
	 * (those past the first window carry the round's first signs too:
	 * vf_rotation_init()) */
	const float *sg = r->signs;
	float scale = 1.0f / sqrtf((float)m);
	for (int k = 0; k < VF_ROT_ROUNDS; k++, sg += n + m) {
		kn->rotate_rounds(out, m, sg, 1, scale);
		kn->rotate_rounds(out + (n - m), m, sg + n, 1, scale);
	}
}
