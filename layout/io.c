/*
 * layout/io.c - the allocation, file-open, writeback, read-ahead and
 * page-fault table, set to the real calls.
 */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>

static int real_open(const char *path, int flags, mode_t mode)
{
	return open(path, flags, mode);
}

static int real_sync_range(int fd)
{
	return sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) ? -errno : 0;
}

static void real_willneed(void *addr, size_t len)
{
	/* (a range past the file reads nothing; one outside the map fails) */
	madvise(addr, len, MADV_WILLNEED);
}

static uint64_t real_major_faults(void)
{
	struct rusage ru;
	return getrusage(RUSAGE_THREAD, &ru) == 0 ? (uint64_t)ru.ru_majflt : 0;
}

static const vf_io real_io = {
	.malloc = malloc,
	.calloc = calloc,
	.realloc = realloc,
	.open = real_open,
	.sync_range = real_sync_range,
	.willneed = real_willneed,
	.major_faults = real_major_faults,
};

vf_io vf_io_ops = {
	.malloc = malloc,
	.calloc = calloc,
	.realloc = realloc,
	.open = real_open,
	.sync_range = real_sync_range,
	.willneed = real_willneed,
	.major_faults = real_major_faults,
};

void vf_io_reset(void)
{
	vf_io_ops = real_io;
}
