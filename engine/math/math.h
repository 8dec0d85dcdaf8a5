/*
 * engine/math/math.h - what math/ offers the other folders: the distance
 * kernels (kernels.h), the rotation (rotation.h), RaBitQ codes (rabitq.h),
 * k-means and nearest centroids (kmeans.h), jobs on every CPU (parallel.h)
 * and the top-k heap (topk.h).  None of them knows the store.
 */
#ifndef VF_MATH_H
#define VF_MATH_H

#include "kernels.h"
#include "kmeans.h"
#include "parallel.h"
#include "rabitq.h"
#include "rotation.h"
#include "topk.h"

#endif
