/*
 * layout/io.c - the allocation, file-open, writeback and read-ahead table,
 * set to the real calls.
 */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>

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

static const vf_io real_io = {
	.malloc = malloc,
	.calloc = calloc,
	.realloc = realloc,
	.open = real_open,
	.sync_range = real_sync_range,
	.willneed = real_willneed,
};

vf_io vf_io_ops = {
	.malloc = malloc,
	.calloc = calloc,
	.realloc = realloc,
	.open = real_open,
	.sync_range = real_sync_range,
	.willneed = real_willneed,
};

void vf_io_reset(void)
{
	vf_io_ops = real_io;
}
