/*
 * engine/maint/backup.c - a consistent copy of the store to a file descriptor.
 */
#include "handle.h"

int vecfs_backup(vecfs *v, int fd)
{
	return vf_store_backup(v->store, fd);
}
