/*
 * engine/math/topk.h - a bounded max-heap of the k smallest items by a float
 * or double key, so that the k-th best so far is at the top (+inf until
 * there are k): one definition for the bounds and exact results of a search and the
 * nearest neighbours of calibration's sample queries.
 */
#ifndef VF_TOPK_H
#define VF_TOPK_H

#include <math.h>
#include <stdint.h>

#define TOPK_HEAP(name, type, KEY)                                              \
	typedef struct name {                                                   \
		type *v;                                                        \
		uint32_t n, k;                                                  \
	} name;                                                                 \
                                                                                \
	static __attribute__((unused)) void name##_push(name *h, type x)                                \
	{                                                                       \
		uint32_t i;                                                     \
		if (h->n < h->k) {                                              \
			i = h->n++;                                             \
			while (i > 0 && KEY(h->v[(i - 1) / 2]) < KEY(x)) {      \
				h->v[i] = h->v[(i - 1) / 2];                    \
				i = (i - 1) / 2;                                \
			}                                                       \
			h->v[i] = x;                                            \
			return;                                                 \
		}                                                               \
		if (!(KEY(x) < KEY(h->v[0])))                                   \
			return;                                                 \
		i = 0;                                                          \
		for (;;) {                                                      \
			uint32_t l = 2 * i + 1, m = i;                          \
			__typeof__(KEY(x)) mv = KEY(x);                         \
			if (l < h->n && KEY(h->v[l]) > mv)                      \
				m = l, mv = KEY(h->v[l]);                       \
			if (l + 1 < h->n && KEY(h->v[l + 1]) > mv)              \
				m = l + 1;                                      \
			if (m == i)                                             \
				break;                                          \
			h->v[i] = h->v[m];                                      \
			i = m;                                                  \
		}                                                               \
		h->v[i] = x;                                                    \
	}                                                                       \
                                                                                \
	static inline __attribute__((unused)) __typeof__(KEY(*(type *)0))       \
	name##_top(const name *h)                                               \
	{                                                                       \
		return h->n < h->k ? INFINITY : KEY(h->v[0]);                   \
	}

#define KEY_SELF(x) (x)
#define KEY_DIST(x) ((x).d)

#endif
