/*
 * engine/kmeans.h - k-means for IVF training and nearest-centroid search.
 */
#ifndef VF_KMEANS_H
#define VF_KMEANS_H

#include <stddef.h>
#include <stdint.h>

/* Centroids in panel layout for fast nearest-centroid search. */
typedef struct vf_cindex {
	uint32_t k, dim, npanels;
	float *panels; /* npanels * dim * VF_PANEL, padding centroids are far */
	float *norms;  /* k squared norms */
	uint16_t *half; /* the panels times 2^half_exp in binary16, or NULL */
	float half_unscale; /* 2^-half_exp */
} vf_cindex;

int vf_cindex_init(vf_cindex *ci, const float *centroids, uint32_t k, uint32_t dim);
void vf_cindex_free(vf_cindex *ci);
/* dots[j] = <x, c_j> for all j (npanels*VF_PANEL entries). */
void vf_cindex_dots(const vf_cindex *ci, const float *x, float *dots);
/* A binary16 copy of the panels for probing: half the bytes to read for
 * each query.  All centroids are scaled by one power of two first, so the
 * largest coordinate becomes 2^15 (no overflow, and the relative rounding
 * of every coordinate not far below it is 2^-11 at most). */
int vf_cindex_add_half(vf_cindex *ci);
/* The dots for ranking clusters: from the binary16 copy when there is
 * one (<x, rounded c_j>, unscaled exactly), else vf_cindex_dots(). */
void vf_cindex_probe_dots(const vf_cindex *ci, const float *x, float *dots);
/* Index of the nearest centroid (l2) of each of n points; threads >= 1. */
void vf_nearest(const vf_cindex *ci, const float *pts, size_t n, uint32_t *out,
		float *dist, int threads);

/* Progress/abort hook: return non-zero to stop. */
typedef int (*vf_tick_fn)(void *arg, int pct);

/* Train k centroids on n points (row-major, dim floats) with k-means++
 * seeding on a subsample, Lloyd iterations and empty-cluster repair.
 * Returns 0, -ECANCELED or -ENOMEM. */
int vf_kmeans(const float *pts, size_t n, uint32_t dim, uint32_t k, int iters,
	      uint64_t seed, int threads, float *centroids, vf_tick_fn tick,
	      void *targ);

/* The mean of n points (dim floats each) leaving out those whose norm is
 * more than VF_NORM_OUTLIER times the median norm: a few huge records do
 * not move it.  Returns 0 or -ENOMEM. */
#define VF_NORM_OUTLIER 8
int vf_robust_mean(const float *pts, size_t n, uint32_t dim, float *mean);

/* How many clusters suit n records: about sqrt(n) (see kmeans.c). */
uint32_t vf_auto_nlist(uint64_t n);
/* Rows of k-means' training sample for n records in nlist clusters of dim
 * dimensions, and its Lloyd iterations in *iters. */
uint64_t vf_train_sample(uint64_t n, uint32_t nlist, uint32_t dim, int *iters);

#endif
