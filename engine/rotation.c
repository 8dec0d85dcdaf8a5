/*
 * engine/rotation.c - randomized Hadamard rotation.
 */
#include "rotation.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
	r->signs = malloc(sizeof(float) * VF_ROT_ROUNDS * r->pdim);
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

static void fwht(float *x, uint32_t n)
{
	for (uint32_t h = 1; h < n; h *= 2)
		for (uint32_t i = 0; i < n; i += 2 * h)
			for (uint32_t j = i; j < i + h; j++) {
				float a = x[j], b = x[j + h];
				x[j] = a + b;
				x[j + h] = a - b;
			}
}

void vf_rotate(const vf_rotation *r, const float *in, float *out)
{
	uint32_t n = r->pdim;
	float scale = 1.0f / sqrtf((float)n);
	memcpy(out, in, sizeof(float) * r->dim);
	memset(out + r->dim, 0, sizeof(float) * (n - r->dim));
	for (int k = 0; k < VF_ROT_ROUNDS; k++) {
		const float *sg = r->signs + (size_t)k * n;
		for (uint32_t i = 0; i < n; i++)
			out[i] *= sg[i];
		fwht(out, n);
		for (uint32_t i = 0; i < n; i++)
			out[i] *= scale;
	}
}
