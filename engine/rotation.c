/*
 * engine/rotation.c - randomized Hadamard rotation.
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
	uint32_t p = 64;
	while (p < dim)
		p *= 2;
	return p;
}

int vf_rotation_init(vf_rotation *r, uint32_t dim, uint64_t seed)
{
	r->dim = dim;
	r->pdim = vf_padded_dim(dim);
	r->seed = seed;
	r->signs = vf_malloc(sizeof(float) * VF_ROT_ROUNDS * r->pdim);
	if (!r->signs)
		return -ENOMEM;
	uint64_t s = seed ^ 0x726f746174696f6eULL;
	for (uint32_t i = 0; i < VF_ROT_ROUNDS * r->pdim; i++)
		r->signs[i] = (vf_splitmix(&s) >> 63) ? -1.0f : 1.0f;
	return 0;
}

void vf_rotation_free(vf_rotation *r)
{
	free(r->signs);
	r->signs = NULL;
}

void vf_rotate(const vf_rotation *r, const float *in, float *out)
{
	uint32_t n = r->pdim;
	memcpy(out, in, sizeof(float) * r->dim);
	memset(out + r->dim, 0, sizeof(float) * (n - r->dim));
	vf_kernels_get()->rotate_rounds(out, n, r->signs, VF_ROT_ROUNDS, 1.0f / sqrtf((float)n));
}

