/*
 * engine/backup.c - a consistent copy of the store to a file descriptor.
 */
#include "internal.h"

int vecfs_backup(vecfs *v, int fd)
{
	pthread_rwlock_rdlock(&v->store->resize);
	int rc = mdb_env_copyfd2(v->store->env, fd, MDB_CP_COMPACT);
	pthread_rwlock_unlock(&v->store->resize);
	return vf_mdb_err(rc);
}
