/*
 * tests/bench_kernels.c - time of the encoder a row (vf_encode: residual,
 * rotation, the scan for a scale, codes and bit planes), of the rotation
 * alone (every query and every row written takes one: vf_rotate), and of
 * a row's bytes for the nearest centroid's 8-bit first look (max_abs and
 * q8_point, as kmeans.c's q8_query() calls them), with the kernel
 * table VECFS_KERNEL names (else the best this CPU has).  Not a test: `make
 * bench-kernels` runs it once a table.  The check value is the same for
 * every table (they agree bit for bit), so a change that alters codes shows.
 *
 * usage: bench_kernels [ROWS]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "math/kernels.h"
#include "math/rabitq.h"
#include "math/rotation.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define DISTINCT 1024 /* rows cycled through (they stay in the cache) */

static int run(uint32_t dim, uint32_t bits, int with_mu, long rows)
{
	vf_rotation rot;
	if (vf_rotation_init(&rot, dim, vf_padded_dim(dim), 7))
		return 1;
	uint32_t pd = rot.pdim;
	float *v = malloc(sizeof(float) * dim * DISTINCT), *c = malloc(sizeof(float) * dim);
	float *rc = malloc(sizeof(float) * pd), *rmu = malloc(sizeof(float) * pd);
	uint8_t *planes = malloc((size_t)pd * bits / 8);
	if (!v || !c || !rc || !rmu || !planes)
		return 1;
	uint64_t s = 1;
	for (size_t i = 0; i < (size_t)dim * DISTINCT; i++)
		v[i] = (float)(vf_splitmix(&s) % 1000) / 10.0f;
	for (uint32_t i = 0; i < dim; i++)
		c[i] = 50.0f + (float)(vf_splitmix(&s) % 100) / 10.0f;
	vf_rotate(&rot, c, rc);
	for (uint32_t i = 0; i < pd; i++)
		rmu[i] = rc[i] * 0.9f;
	vf_encoder e;
	if (vf_encoder_init(&e, &rot, bits, 0, with_mu ? rmu : NULL))
		return 1;
	vf_code out;
	double check = 0, best = 1e9;
	for (int round = 0; round < 3; round++) { /* the best of three */
		double t0 = now();
		for (long i = 0; i < rows; i++) {
			vf_encode(&e, v + (size_t)(i % DISTINCT) * dim, c, rc, planes, &out);
			if (round == 0)
				check += (double)out.add + out.r1 + out.e1 + out.rb + out.eb +
					 out.cdot + planes[i % (pd * bits / 8)];
		}
		double us = (now() - t0) / (double)rows * 1e6;
		best = us < best ? us : best;
	}
	printf("%-7s dim %4u bits %u %s  %7.3f us a row  (check %.9g)\n", vf_kernels_get()->name,
	       dim, bits, with_mu ? "table  " : "no table", best, check);
	vf_encoder_free(&e);
	vf_rotation_free(&rot);
	free(v);
	free(c);
	free(rc);
	free(rmu);
	free(planes);
	return 0;
}

/* DISTINCT rows of dim values in [-100, 100], tenths (NULL: no memory). */
static float *centred_rows(uint32_t dim)
{
	float *v = malloc(sizeof(float) * dim * DISTINCT);
	uint64_t s = 1;
	for (size_t i = 0; v && i < (size_t)dim * DISTINCT; i++)
		v[i] = (float)(vf_splitmix(&s) % 2001) / 10.0f - 100.0f;
	return v;
}

/* A row's bytes for the 8-bit first look, as q8_query() makes them. */
static int run_q8(uint32_t dim, long rows)
{
	const vf_kernels *kn = vf_kernels_get();
	uint32_t d4 = (dim + 3) & ~3u;
	float *v = centred_rows(dim);
	uint8_t *xu = malloc(d4);
	if (!v || !xu)
		return 1;
	double check = 0, best = 1e9;
	for (int round = 0; round < 3; round++) {
		double t0 = now();
		for (long i = 0; i < rows; i++) {
			const float *x = v + (size_t)(i % DISTINCT) * dim;
			float mx = kn->max_abs(x, dim);
			double dx2, x2;
			kn->q8_point(x, dim, d4, mx / 63, 63 / mx, xu, &dx2, &x2);
			if (round == 0)
				check += dx2 + x2 + xu[i % d4];
		}
		double us = (now() - t0) / (double)rows * 1e6;
		best = us < best ? us : best;
	}
	printf("%-7s dim %4u first look's bytes  %7.3f us a row  (check %.9g)\n", kn->name, dim,
	       best, check);
	free(v);
	free(xu);
	return 0;
}

/* The rotation of a vector, in one transform (128, 1,024) or two windows
 * a round (784 in 832, 960, 1,536). */
static int run_rotate(uint32_t dim, long rows)
{
	vf_rotation rot;
	if (vf_rotation_init(&rot, dim, vf_padded_dim(dim), 7))
		return 1;
	float *v = centred_rows(dim), *out = malloc(sizeof(float) * rot.pdim);
	if (!v || !out)
		return 1;
	double check = 0, best = 1e9;
	for (int round = 0; round < 3; round++) {
		double t0 = now();
		for (long i = 0; i < rows; i++) {
			vf_rotate(&rot, v + (size_t)(i % DISTINCT) * dim, out);
			if (round == 0)
				check += out[i % rot.pdim];
		}
		double us = (now() - t0) / (double)rows * 1e6;
		best = us < best ? us : best;
	}
	printf("%-7s dim %4u rotation in %4u     %7.3f us a row  (check %.9g)\n",
	       vf_kernels_get()->name, dim, rot.pdim, best, check);
	vf_rotation_free(&rot);
	free(v);
	free(out);
	return 0;
}

int main(int argc, char **argv)
{
	long rows = argc > 1 ? atol(argv[1]) : 100000;
	static const uint32_t dims[] = {128, 784}, bitss[] = {1, 4, 8};
	int rc = 0;
	for (size_t d = 0; d < 2; d++)
		for (size_t b = 0; b < 3; b++)
			rc |= run(dims[d], bitss[b], 1, dims[d] > 256 ? rows / 4 : rows);
	rc |= run(128, 4, 0, rows);
	for (size_t d = 0; d < 2; d++)
		rc |= run_q8(dims[d], rows);
	static const uint32_t rdims[] = {128, 784, 960, 1024, 1536};
	for (size_t d = 0; d < sizeof rdims / sizeof *rdims; d++)
		rc |= run_rotate(rdims[d], rows);
	return rc;
}
