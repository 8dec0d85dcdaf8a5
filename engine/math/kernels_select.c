/*
 * engine/math/kernels_select.c - the kernels' run-time dispatch: the best set
 * the CPU runs (scalar, AVX2, AVX-512, AVX-512 with VNNI), or the one
 * VECFS_KERNEL names.
 */
#include "kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "vecfs.h"

#if defined(__x86_64__)
/* F16C (binary16 conversions), which not every compiler's
 * __builtin_cpu_supports() knows: CPUID leaf 1, ECX bit 29. */
static int has_f16c(void)
{
	unsigned a, b, c, d;
	return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

const vf_kernels *vf_kernels_named(const char *name)
{
	if (strcmp(name, "scalar") == 0)
		return &vf_kernels_scalar;
#if defined(__x86_64__)
	__builtin_cpu_init();
	int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
	if (strcmp(name, "avx2") == 0)
		return avx2 ? &vf_kernels_avx2 : NULL;
	int avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
		     __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
		     __builtin_cpu_supports("avx512dq");
	if (strcmp(name, "avx512") == 0)
		return avx512 ? &vf_kernels_avx512 : NULL;
	if (strcmp(name, "avx512vnni") == 0)
		return avx512 && __builtin_cpu_supports("avx512vnni") ? vf_kernels_avx512vnni() : NULL;
#endif
	return NULL;
}

const vf_kernels *vf_kernels_get(void)
{
	static const vf_kernels *_Atomic chosen;
	const vf_kernels *k = atomic_load_explicit(&chosen, memory_order_acquire);
	if (k)
		return k;
	const char *force = getenv("VECFS_KERNEL");
	static const char *const best[] = { "avx512vnni", "avx512", "avx2", "scalar" };
	k = force ? vf_kernels_named(force) : NULL;
	for (size_t i = 0; !k; i++)
		k = vf_kernels_named(best[i]);
	atomic_store_explicit(&chosen, k, memory_order_release);
	return k;
}

const char *vecfs_kernel_name(void)
{
	return vf_kernels_get()->name;
}
