#ifndef FS_HELD_H
#define FS_HELD_H
/*
 * fs/held.h - FS_ASSERT_HELD(mu): the caller holds mutex mu, as a function
 * whose comment says "with mu held" needs; an assertion, so compiled out
 * with NDEBUG.  A trylock that succeeds means no thread held it (one held
 * by another thread passes: the check catches a lock not taken).  The
 * engine's twin is VF_ASSERT_HELD (engine/handle.h): fs/ sees no engine
 * header.
 */
#include <assert.h>
#include <pthread.h>

static inline int fs_mutex_held(pthread_mutex_t *mu)
{
	if (pthread_mutex_trylock(mu) != 0)
		return 1;
	pthread_mutex_unlock(mu);
	return 0;
}
#define FS_ASSERT_HELD(mu) assert(fs_mutex_held(mu))

#endif
