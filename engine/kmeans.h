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
	/* the same centroids quantized to int8 (one scale each), panels laid
	 * out [d2][VF_PANEL][2], for a cheap first look at all of them */
	uint32_t d2;   /* dimension pairs: (dim + 1) / 2 */
	int8_t *panels8;
	float *scale8; /* npanels * VF_PANEL */
} vf_cindex;

int vf_cindex_init(vf_cindex *ci, const float *centroids, uint32_t k, uint32_t dim);
void vf_cindex_free(vf_cindex *ci);
/* dots[j] = <x, c_j> for all j (npanels*VF_PANEL entries). */
void vf_cindex_dots(const vf_cindex *ci, const float *x, float *dots);
/* approx[j] ~ <x, c_j> for all j (npanels*VF_PANEL entries) from the int8
 * panels: within about 1% of |x| |c_j|; `scratch` holds d2 + npanels *
 * VF_PANEL int32. */
void vf_cindex_dots8(const vf_cindex *ci, const float *x, int32_t *scratch, float *approx);
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

#endif
