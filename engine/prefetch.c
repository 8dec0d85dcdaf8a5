/*
 * engine/prefetch.c - the reads of a search planned ahead (prefetch.h).
 */
#include "prefetch.h"

#include <sys/resource.h>

uint64_t vf_thread_major_faults(void)
{
	struct rusage ru;
	return getrusage(RUSAGE_THREAD, &ru) == 0 ? (uint64_t)ru.ru_majflt : 0;
}
