/* delayfs: a read-only FUSE pass-through of one directory that waits a fixed time before answering each
 * request that would be a round trip to a network file system's servers: a data read (READ), an open, a
 * lookup or getattr, a readdir. The stand-in for FSx for Lustre in benchmarks/inplace_job.py: every read
 * that misses the client's page cache pays one latency (the kernel's read-ahead sends several at once, and
 * this daemon answers them on several threads, as Lustre pipelines RPCs); bandwidth is not limited.
 *
 * Build: cc -O2 -Wall -o delayfs delayfs.c $(pkg-config --cflags --libs fuse3)
 * Usage: delayfs SOURCE_DIR LATENCY_US MOUNTPOINT [FUSE options, e.g. -o allow_other,ro]
 * At exit (unmounted) it writes one line to stderr: the requests it delayed, per kind, and the bytes read.
 */
#define FUSE_USE_VERSION 35
#include <fuse.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char source[PATH_MAX];
static long latency_ns;
static atomic_long n_read, n_open, n_meta, n_readdir, bytes_read;

static void wait_latency(atomic_long *counter) {
    atomic_fetch_add(counter, 1);
    if (latency_ns <= 0) return;
    struct timespec ts = {latency_ns / 1000000000L, latency_ns % 1000000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

static void full(char *out, const char *path) { snprintf(out, PATH_MAX, "%s%s", source, path); }

static void *dl_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
    (void)conn;
    cfg->use_ino = 1;
    cfg->kernel_cache = 1;  /* keep a file's pages across opens, as a Lustre client does under its locks */
    return NULL;
}

static int dl_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    char p[PATH_MAX];
    if (fi) return fstat((int)fi->fh, st) == -1 ? -errno : 0;
    wait_latency(&n_meta);
    full(p, path);
    return lstat(p, st) == -1 ? -errno : 0;
}

static int dl_readlink(const char *path, char *buf, size_t size) {
    char p[PATH_MAX];
    wait_latency(&n_meta);
    full(p, path);
    ssize_t n = readlink(p, buf, size - 1);
    if (n == -1) return -errno;
    buf[n] = '\0';
    return 0;
}

static int dl_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off, struct fuse_file_info *fi,
                      enum fuse_readdir_flags flags) {
    (void)off; (void)fi; (void)flags;
    char p[PATH_MAX];
    wait_latency(&n_readdir);
    full(p, path);
    DIR *d = opendir(p);
    if (!d) return -errno;
    struct dirent *e;
    while ((e = readdir(d))) {
        struct stat st = {0};
        st.st_ino = e->d_ino;
        st.st_mode = (mode_t)(e->d_type << 12);
        if (fill(buf, e->d_name, &st, 0, 0)) break;
    }
    closedir(d);
    return 0;
}

static int dl_open(const char *path, struct fuse_file_info *fi) {
    char p[PATH_MAX];
    if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
    wait_latency(&n_open);
    full(p, path);
    int fd = open(p, O_RDONLY);
    if (fd == -1) return -errno;
    fi->fh = (uint64_t)fd;
    fi->keep_cache = 1;
    return 0;
}

static int dl_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)path;
    wait_latency(&n_read);
    ssize_t n = pread((int)fi->fh, buf, size, off);
    if (n == -1) return -errno;
    atomic_fetch_add(&bytes_read, n);
    return (int)n;
}

static int dl_release(const char *path, struct fuse_file_info *fi) {
    (void)path;
    close((int)fi->fh);
    return 0;
}

static int dl_statfs(const char *path, struct statvfs *st) {
    char p[PATH_MAX];
    full(p, path);
    return statvfs(p, st) == -1 ? -errno : 0;
}

static const struct fuse_operations ops = {
    .init = dl_init, .getattr = dl_getattr, .readlink = dl_readlink, .readdir = dl_readdir,
    .open = dl_open, .read = dl_read, .release = dl_release, .statfs = dl_statfs,
};

int main(int argc, char *argv[]) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s SOURCE_DIR LATENCY_US MOUNTPOINT [FUSE options]\n", argv[0]);
        return 2;
    }
    if (!realpath(argv[1], source)) { perror(argv[1]); return 2; }
    char *end;
    long us = strtol(argv[2], &end, 10);
    if (*end || us < 0) { fprintf(stderr, "delayfs: bad latency %s\n", argv[2]); return 2; }
    latency_ns = us * 1000L;
    /* fuse_main gets: prog MOUNTPOINT [options] */
    argv[2] = argv[0];
    int rc = fuse_main(argc - 2, argv + 2, &ops, NULL);
    fprintf(stderr, "delayfs: reads %ld opens %ld lookups %ld readdirs %ld bytes %ld\n", atomic_load(&n_read),
            atomic_load(&n_open), atomic_load(&n_meta), atomic_load(&n_readdir), atomic_load(&bytes_read));
    return rc;
}
