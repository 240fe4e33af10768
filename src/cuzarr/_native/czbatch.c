/*
 * cuzarr's batch helper: loops over many small chunks in C, so that the Python caller crosses
 * into C (and releases the GIL, through ctypes) once per batch instead of once per chunk.
 *
 * It holds no codec. The codec functions are passed in as pointers: c-blosc's thread-safe
 * entry points (blosc_decompress_ctx, blosc_compress_ctx) and libzstd's decoder
 * (ZSTD_createDCtx, ZSTD_decompressDCtx, ...) as exported by the libraries numcodecs ships, looked up by
 * cuzarr.codecs.blosc_batch and cuzarr.codecs.zstd_batch. C99 with POSIX threads and the
 * __atomic builtins of GCC and Clang, no Python headers: it is loaded with ctypes, so one build
 * serves every Python version.
 *
 * Built by hatch_build.py when cuzarr is installed (cc -O2 -std=c99 -pthread -shared -fPIC).
 */
#define _GNU_SOURCE /* open's O_CLOEXEC and syscall() under -std=c99 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* int blosc_decompress_ctx(const void *src, void *dest, size_t destsize, int numinternalthreads) */
typedef int (*cz_decompress_fn)(const void *, void *, size_t, int);

/* int blosc_compress_ctx(int clevel, int doshuffle, size_t typesize, size_t nbytes,
 *                        const void *src, void *dest, size_t destsize, const char *compressor,
 *                        size_t blocksize, int numinternalthreads) */
typedef int (*cz_compress_fn)(int, int, size_t, size_t, const void *, void *, size_t,
                              const char *, size_t, int);

/* The ABI version Python checks before using the library (bump on any signature change). */
int cz_abi_version(void) { return 22; }

/*
 * Decompress n frames, frame i starting at src + src_offsets[i], into dest + dest_offsets[i]
 * (room for nbytes each). status[i] is the decoder's return value (nbytes on success). The
 * caller has checked each frame's header against its stored length. Returns how many failed.
 */
int64_t cz_decompress_many(cz_decompress_fn fn, int64_t n, const uint8_t *src,
                           const int64_t *src_offsets, uint8_t *dest,
                           const int64_t *dest_offsets, int64_t nbytes, int32_t *status)
{
    int64_t failed = 0;
    for (int64_t i = 0; i < n; i++) {
        int r = fn(src + src_offsets[i], dest + dest_offsets[i], (size_t)nbytes, 1);
        status[i] = r;
        if (r != nbytes) {
            failed++;
        }
    }
    return failed;
}

/*
 * Compress n inputs of nbytes each, input i at src + src_offsets[i], into dest + dest_offsets[i]
 * (room for destsize bytes each). sizes[i] is the compressed size (<= 0: failed). Returns how
 * many failed.
 */
int64_t cz_compress_many(cz_compress_fn fn, int64_t n, int clevel, int doshuffle,
                         int64_t typesize, int64_t nbytes, const uint8_t *src,
                         const int64_t *src_offsets, uint8_t *dest,
                         const int64_t *dest_offsets, int64_t destsize,
                         const char *compressor, int64_t blocksize, int32_t *sizes)
{
    int64_t failed = 0;
    for (int64_t i = 0; i < n; i++) {
        int r = fn(clevel, doshuffle, (size_t)typesize, (size_t)nbytes, src + src_offsets[i],
                   dest + dest_offsets[i], (size_t)destsize, compressor, (size_t)blocksize, 1);
        sizes[i] = r;
        if (r <= 0) {
            failed++;
        }
    }
    return failed;
}

/* libzstd (as exported by numcodecs' zstd module): ZSTD_createDCtx, ZSTD_freeDCtx,
 * ZSTD_decompressDCtx, ZSTD_isError. */
typedef void *(*cz_zstd_create_fn)(void);
typedef size_t (*cz_zstd_free_fn)(void *);
typedef size_t (*cz_zstd_decompress_fn)(void *, void *, size_t, const void *, size_t);
typedef unsigned (*cz_zstd_iserror_fn)(size_t);

/*
 * Decompress n zstd chunks (each one or more frames), chunk i being src_lengths[i] bytes at
 * src + src_offsets[i], into dest + dest_offsets[i] (room for nbytes each), with one
 * decompression context for the whole batch. status[i] is the decoded size, -1 on an error
 * (a corrupt frame, or output larger than nbytes). Returns how many did not decode to exactly
 * nbytes (-1: no context could be made).
 */
int64_t cz_zstd_decompress_many(cz_zstd_create_fn create, cz_zstd_free_fn release,
                                cz_zstd_decompress_fn decompress, cz_zstd_iserror_fn iserror,
                                int64_t n, const uint8_t *src, const int64_t *src_offsets,
                                const int64_t *src_lengths, uint8_t *dest,
                                const int64_t *dest_offsets, int64_t nbytes, int64_t *status)
{
    void *dctx = create();
    if (dctx == NULL) {
        return -1;
    }
    int64_t failed = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t r = decompress(dctx, dest + dest_offsets[i], (size_t)nbytes,
                              src + src_offsets[i], (size_t)src_lengths[i]);
        status[i] = iserror(r) ? -1 : (int64_t)r;
        if (status[i] != nbytes) {
            failed++;
        }
    }
    release(dctx);
    return failed;
}

/* Copy n byte runs: lengths[i] bytes from src + src_offsets[i] to dest + dest_offsets[i]. */
void cz_gather(int64_t n, const uint8_t *src, const int64_t *src_offsets,
               const int64_t *lengths, uint8_t *dest, const int64_t *dest_offsets)
{
    for (int64_t i = 0; i < n; i++) {
        memcpy(dest + dest_offsets[i], src + src_offsets[i], (size_t)lengths[i]);
    }
}

/*
 * Copy n bytes from s to d, the whole cache lines of d with non-temporal (streaming) stores
 * where this build has SSE2: those lines are written to memory without first being read into
 * the cache, and without evicting what the cache holds. The partial lines at either end are
 * written by memcpy: a partial line written with streaming stores costs far more than its read
 * (a 512 KiB chunk into 128-byte rows of a 256 MiB array, 16 bytes past a line as NumPy
 * allocates: 118 us streaming every 16 bytes, 117 us memcpy, 64 us streaming whole lines;
 * rows starting on a line: memcpy 67 us, streaming 20 us; bench/stream_rows.c). Used for
 * chunks placed into outputs larger than the cache, whose lines the copy would otherwise read
 * in only to overwrite them. The caller issues the fence (cz_copy_array) once the copy is
 * done.
 */
static void cz_stream_run(uint8_t *d, const uint8_t *s, size_t n)
{
#if defined(__SSE2__)
    size_t head = (64 - ((uintptr_t)d & 63)) & 63;
    if (head > n) {
        head = n;
    }
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
#endif
    memcpy(d, s, n);
}

/* Rows shorter than this are copied with memcpy even when streaming (they hold no whole
 * cache line). */
#define CZ_STREAM_MIN_RUN 64

/* Most dimensions a box copy handles (zarr's arrays have far fewer; NumPy allows 64). */
#define CZ_MAX_DIMS 64

/*
 * Copy a box of extent[0] x ... x extent[ndim - 1] elements of itemsize bytes from src to dst,
 * element (0, ..., 0) of the box at each pointer, with byte strides src_strides and
 * dst_strides (any sign, 0 for a broadcast source axis). Rows along the last dimension are one
 * memcpy where both sides are contiguous there (with streaming != 0, rows of at least
 * CZ_STREAM_MIN_RUN bytes are written with cz_stream_run instead, and the caller fences). The
 * caller has checked that the box lies inside both.
 */
static void cz_copy_strided(const uint8_t *src, const int64_t *src_strides, uint8_t *dst,
                            const int64_t *dst_strides, int32_t ndim, int64_t itemsize,
                            const int64_t *extent, int streaming)
{
    int64_t index[CZ_MAX_DIMS];
    for (int32_t d = 0; d < ndim; d++) {
        if (extent[d] == 0) {
            return;
        }
        index[d] = 0;
    }
    const int32_t last = ndim - 1;
    const int64_t src_step = src_strides[last];
    const int64_t dst_step = dst_strides[last];
    const int contiguous = src_step == itemsize && dst_step == itemsize;
    const int64_t run = extent[last] * itemsize;
    const int stream = streaming && run >= CZ_STREAM_MIN_RUN;
    for (;;) {
        if (contiguous && stream) {
            cz_stream_run(dst, src, (size_t)run);
        } else if (contiguous) {
            memcpy(dst, src, (size_t)run);
        } else {
            for (int64_t k = 0; k < extent[last]; k++) {
                memcpy(dst + k * dst_step, src + k * src_step, (size_t)itemsize);
            }
        }
        /* Next row: the odometer over every dimension but the last. */
        int32_t d = last - 1;
        for (; d >= 0; d--) {
            src += src_strides[d];
            dst += dst_strides[d];
            if (++index[d] < extent[d]) {
                break;
            }
            src -= extent[d] * src_strides[d];
            dst -= extent[d] * dst_strides[d];
            index[d] = 0;
        }
        if (d < 0) {
            return;
        }
    }
}

/*
 * Copy an array of extent[0] x ... x extent[ndim - 1] elements of itemsize bytes from src to
 * dst (element (0, ..., 0) at each pointer; byte strides of any sign), as NumPy's dst[...] =
 * src for two arrays of one shape and data type that do not overlap. shape_strides holds the
 * extents, then src's strides, then dst's (ndim values each). streaming != 0 writes rows of
 * at least CZ_STREAM_MIN_RUN bytes with non-temporal stores (cz_stream_run), then fences, so
 * the stores are ordered before anything the caller does next. The caller has checked the
 * arrays (cuzarr._native.copy_array).
 */
void cz_copy_array(const uint8_t *src, uint8_t *dst, int32_t ndim, int64_t itemsize,
                   const int64_t *shape_strides, int32_t streaming)
{
    if (ndim < 1 || ndim > CZ_MAX_DIMS) {
        return;
    }
    cz_copy_strided(src, shape_strides + ndim, dst, shape_strides + 2 * (int64_t)ndim, ndim,
                    itemsize, shape_strides, streaming);
#if defined(__SSE2__)
    if (streaming) {
        _mm_sfence();
    }
#endif
}

/* The byte strides of a C-ordered array of shape (ndim dimensions, itemsize bytes each). */
static void cz_c_strides(const int64_t *shape, int32_t ndim, int64_t itemsize, int64_t *strides)
{
    int64_t step = itemsize;
    for (int32_t d = ndim - 1; d >= 0; d--) {
        strides[d] = step;
        step *= shape[d];
    }
}

/*
 * Copy a box of a C-ordered chunk into an output array: per dimension d, extent[d] elements
 * from chunk index chunk_start[d] to output index out_start[d]. out points at the output's
 * element (0, ..., 0); out_strides are its byte strides (any sign). The caller has checked
 * that the box lies inside both. streaming as cz_copy_strided's (the caller fences).
 */
static void cz_copy_box(const uint8_t *chunk, const int64_t *chunk_shape, int32_t ndim,
                        int64_t itemsize, const int64_t *chunk_start, const int64_t *out_start,
                        const int64_t *extent, const int64_t *chunk_step, uint8_t *out,
                        const int64_t *out_strides, int streaming)
{
    int64_t chunk_strides[CZ_MAX_DIMS], src_strides[CZ_MAX_DIMS];
    cz_c_strides(chunk_shape, ndim, itemsize, chunk_strides);
    const uint8_t *src = chunk;
    uint8_t *dst = out;
    for (int32_t d = 0; d < ndim; d++) {
        src += chunk_start[d] * chunk_strides[d];
        dst += out_start[d] * out_strides[d];
        src_strides[d] = chunk_strides[d] * chunk_step[d];
    }
    cz_copy_strided(src, src_strides, dst, out_strides, ndim, itemsize, extent, streaming);
}

/*
 * Where a box (as cz_read_zstd_boxes takes it) is the whole chunk and its region of the output
 * holds the chunk's bytes in C order, one after another (the region is contiguous: the output's
 * stride along every dimension longer than 1 is the chunk's own): that region's first byte,
 * into which the chunk may be decoded as it is. NULL otherwise.
 */
static uint8_t *cz_whole_region(const int64_t *chunk_shape, int32_t ndim, int64_t itemsize,
                                const int64_t *box, uint8_t *out, const int64_t *out_strides)
{
    int64_t stride = itemsize;
    uint8_t *dst = out;
    for (int32_t d = ndim - 1; d >= 0; d--) {
        if (box[d] != 0 || box[2 * ndim + d] != chunk_shape[d] || box[3 * ndim + d] != 1 ||
            (chunk_shape[d] > 1 && out_strides[d] != stride)) {
            return NULL;
        }
        stride *= chunk_shape[d];
        dst += box[ndim + d] * out_strides[d];
    }
    return dst;
}

/*
 * Whether box (chunk start, out start, extent, chunk step; ndim values each) lies inside a
 * chunk of chunk_shape and an output of out_shape: 0, else -1.
 */
static int cz_check_box(const int64_t *chunk_shape, const int64_t *out_shape, int32_t ndim,
                        const int64_t *box)
{
    for (int32_t d = 0; d < ndim; d++) {
        int64_t start = box[d], at = box[ndim + d], extent = box[2 * ndim + d];
        int64_t step = box[3 * ndim + d];
        /* Written so that no sum can overflow: every bound is checked before it is used.
         * The last element taken, start + (extent - 1) * step, must be < the chunk's
         * extent: (extent - 1) <= (chunk_shape - 1 - start) / step. */
        if (start < 0 || at < 0 || extent < 0 || step < 1 || start > chunk_shape[d] ||
            at > out_shape[d] || extent > out_shape[d] - at ||
            (extent > 0 && (start >= chunk_shape[d] ||
                            extent - 1 > (chunk_shape[d] - 1 - start) / step))) {
            return -1;
        }
    }
    return 0;
}

/* cz_read_file's result for a file that does not exist (ENOENT, ENOTDIR). */
#define CZ_NO_FILE (-2)

/*
 * Read the file path into buf with one read call, as LocalChunkStore.get_many reads small
 * files: a regular file returns everything up to cap bytes at once; a file of cap bytes or
 * more is left to the caller, and a short read of anything else would not decode to the chunk.
 * Returns the bytes read, CZ_NO_FILE, or -1 (any other error, or cap bytes or more).
 */
static int64_t cz_read_file(const char *path, uint8_t *buf, int64_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return errno == ENOENT || errno == ENOTDIR ? CZ_NO_FILE : -1;
    }
    ssize_t got;
    do {
        got = read(fd, buf, (size_t)cap);
    } while (got < 0 && errno == EINTR);
    close(fd);
    return got < 0 || got >= cap ? -1 : (int64_t)got;
}

/*
 * Read, decode and place n zstd chunks, each a file, in one call (the GIL released once for
 * every system call, decode and copy of the batch).
 *
 * paths holds the n files' NUL-terminated paths one after another. shapes holds the chunk's
 * shape, the output's shape and the output's byte strides (ndim values each; the chunk is C
 * ordered, itemsize bytes per element, nbytes in all). boxes[i] = (chunk start, out start,
 * extent, chunk step), ndim values each: the box takes every step-th element of the chunk
 * from its start, extent of them, into consecutive elements of out; every box is checked to
 * lie inside the chunk and the output before anything is read. File i is read into scratch
 * (cap + nbytes bytes, the caller's: reused from batch to batch) with one read call, decoded
 * with the caller's context dctx (ZSTD_createDCtx; one per thread, reused from batch to batch:
 * making one per batch cost ~5 % of a read of 8 KiB chunks) and placed: decoded straight into
 * out where the box is the whole chunk and its region of out is contiguous
 * (cz_whole_region), else into the rest of scratch and its box copied into out (cz_copy_box;
 * streaming != 0: rows of whole cache lines written with streaming stores, fenced before
 * the call returns). status[i]: 1 placed, 0 the file does not exist (ENOENT, ENOTDIR:
 * nothing written), -1 not done here (any other error, a file of cap bytes or more, or one
 * that does not decode to exactly nbytes: the caller reads it the general way, which names
 * the problem or writes the whole region). Returns how many were placed; -1 for arguments it
 * refuses, -2 for a box outside the chunk or the output (nothing done in either).
 */
int64_t cz_read_zstd_boxes(void *dctx, cz_zstd_decompress_fn decompress,
                           cz_zstd_iserror_fn iserror, int64_t n, const char *paths, int64_t cap,
                           int64_t nbytes, int32_t ndim, int64_t itemsize, const int64_t *shapes,
                           const int64_t *boxes, uint8_t *out, uint8_t *scratch,
                           int32_t streaming, int64_t *status)
{
    if (ndim < 1 || ndim > CZ_MAX_DIMS || dctx == NULL || n < 0 || cap < 1 || nbytes < 1 ||
        scratch == NULL) {
        return -1;
    }
    const int64_t *chunk_shape = shapes, *out_shape = shapes + ndim;
    const int64_t *out_strides = shapes + 2 * (int64_t)ndim;
    for (int64_t i = 0; i < n; i++) {
        if (cz_check_box(chunk_shape, out_shape, ndim, boxes + i * 4 * (int64_t)ndim) != 0) {
            return -2;
        }
    }
    uint8_t *stored = scratch, *chunk = scratch + cap;
    int64_t placed = 0;
    const char *path = paths;
    for (int64_t i = 0; i < n; i++, path += strlen(path) + 1) {
        int64_t got = cz_read_file(path, stored, cap);
        status[i] = got == CZ_NO_FILE ? 0 : -1;
        if (got < 0) {
            continue;
        }
        const int64_t *box = boxes + i * 4 * (int64_t)ndim;
        uint8_t *whole = cz_whole_region(chunk_shape, ndim, itemsize, box, out, out_strides);
        uint8_t *into = whole != NULL ? whole : chunk;
        size_t size = decompress(dctx, into, (size_t)nbytes, stored, (size_t)got);
        if (iserror(size) || (int64_t)size != nbytes) {
            continue;
        }
        if (whole == NULL) {
            cz_copy_box(chunk, chunk_shape, ndim, itemsize, box, box + ndim, box + 2 * ndim,
                        box + 3 * ndim, out, out_strides, streaming);
        }
        status[i] = 1;
        placed++;
    }
#if defined(__SSE2__)
    if (streaming) {
        _mm_sfence();
    }
#endif
    return placed;
}

/* renameat2's flag that swaps two names (Linux 3.15+; <linux/fs.h>). */
#define CZ_RENAME_EXCHANGE 2

/*
 * Swap the files at a and b atomically: 0 done, else the errno (ENOSYS where this system has
 * no renameat2).
 */
static int cz_exchange(const char *a, const char *b)
{
#ifdef SYS_renameat2
    if (syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, CZ_RENAME_EXCHANGE) == 0) {
        return 0;
    }
    return errno;
#else
    (void)a;
    (void)b;
    return ENOSYS;
#endif
}

/* Longest temporary name put_files builds (PATH_MAX of Linux). */
#define CZ_NAME_MAX 4096

/*
 * Make the folders above the file at path (as os.makedirs(dirname(path), exist_ok=True), mode
 * 0777 less the umask): 0 when they exist afterwards, else the errno. name is scratch space of
 * CZ_NAME_MAX bytes.
 */
static int cz_make_parents(const char *path, char *name)
{
    size_t len = strlen(path);
    if (len >= CZ_NAME_MAX) {
        return ENAMETOOLONG;
    }
    memcpy(name, path, len + 1);
    char *cut = strrchr(name, '/');
    if (cut == NULL || cut == name) {
        return 0;
    }
    *cut = '\0';
    if (mkdir(name, 0777) == 0 || errno == EEXIST) {
        return 0;
    }
    if (errno != ENOENT) {
        return errno;
    }
    /* The folder above is missing too: make the chain from the top down. */
    for (char *p = name + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            int made = mkdir(name, 0777) == 0 || errno == EEXIST;
            *p = '/';
            if (!made) {
                return errno;
            }
        }
    }
    return (mkdir(name, 0777) == 0 || errno == EEXIST) ? 0 : errno;
}

/*
 * Write size bytes from data to a new file at tmp and move it to path (see cz_put_files, whose
 * status values it returns; *exchange is cleared where swaps are refused).
 */
static int32_t cz_put_one(const char *path, const char *tmp, const uint8_t *data, int64_t size,
                          int32_t *exchange, int64_t exchange_min)
{
    int err = 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT) {
        char folder[CZ_NAME_MAX];
        if (cz_make_parents(path, folder) == 0) {
            fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        } else {
            errno = ENOENT;
        }
    }
    if (fd < 0) {
        return -errno;
    }
    int64_t pos = 0;
    while (pos < size) {
        ssize_t wrote = write(fd, data + pos, (size_t)(size - pos));
        if (wrote < 0) {
            if (errno == EINTR) {
                continue;
            }
            err = errno;
            break;
        }
        pos += wrote;
    }
    if (close(fd) != 0 && err == 0 && errno != EINTR) {
        err = errno;
    }
    int32_t done = -1;
    if (err == 0 && *exchange && size >= exchange_min) {
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            int swap = cz_exchange(tmp, path);
            if (swap == 0) {
                done = 1;
            } else if (swap == EINVAL || swap == ENOSYS || swap == EOPNOTSUPP) {
                *exchange = 0;
                done = 2;
            } else if (swap != ENOENT) {
                err = swap;
            }
        }
    }
    if (err == 0 && done != 1) {
        if (rename(tmp, path) != 0) {
            err = errno;
        } else if (done != 2) {
            done = 0;
        }
    }
    if (err != 0) {
        unlink(tmp);
        return -err;
    }
    return done;
}

/* The temporary name of file i (see cz_put_files): 0, or -ENAMETOOLONG. */
static int cz_temp_name(char *tmp, const char *path, const char *tag, int64_t number,
                        const char *suffix)
{
    int named = snprintf(tmp, CZ_NAME_MAX, "%s%s%llx%s", path, tag, (unsigned long long)number,
                         suffix);
    return (named < 0 || named >= CZ_NAME_MAX) ? -ENAMETOOLONG : 0;
}

/*
 * Write n files atomically in one call (the GIL released once for the batch's system calls),
 * as LocalChunkStore.put writes one. paths holds n NUL-terminated paths back to back; file i
 * gets lengths buffers[2i + 1] bytes from the address buffers[2i]. They are written to a new
 * file at the temporary name path + tag + (first + i in lowercase hex) + suffix (created
 * exclusively, mode 0644), which is closed and then moved to the path: swapped with the file
 * there (renameat2 RENAME_EXCHANGE) when exchange is non-zero, the file has at least
 * exchange_min bytes and a regular file is there, else renamed over it. A folder missing on
 * the way to a file is made (as os.makedirs does) and the file tried once more.
 *
 * status[i]: 0 renamed; 1 swapped (the temporary name now holds the old file: the caller
 * removes it); 2 renamed because this system or file system cannot swap (later files are not
 * swapped either: the caller stops asking); a negative errno when the file was not written
 * (no temporary file is left, the old file is untouched: the caller writes that file the
 * general way, which names the problem). Returns how many failed.
 */
int64_t cz_put_files(int64_t n, const char *paths, const char *tag, int64_t first,
                     const char *suffix, const int64_t *buffers, int32_t exchange,
                     int64_t exchange_min, int32_t *status)
{
    char tmp[CZ_NAME_MAX];
    int64_t failed = 0;
    const char *path = paths;
    for (int64_t i = 0; i < n; i++, path += strlen(path) + 1) {
        const uint8_t *data = (const uint8_t *)(intptr_t)buffers[2 * i];
        int32_t r = cz_temp_name(tmp, path, tag, first + i, suffix);
        if (r == 0) {
            r = cz_put_one(path, tmp, data, buffers[2 * i + 1], &exchange, exchange_min);
        }
        status[i] = r;
        failed += r < 0;
    }
    return failed;
}

/* status of cz_put_boxes for a box the compressor refused (nothing written). */
#define CZ_NOT_ENCODED (-(1 << 20))

/* cz_put_boxes' compressors. */
#define CZ_STORE 0 /* the C-order bytes as they are */
#define CZ_BLOSC 1 /* c-blosc: fns {blosc_compress_ctx}, args {clevel, doshuffle, typesize,
                    * blocksize}, cname */
#define CZ_ZSTD 2  /* libzstd: fns {a ZSTD_CCtx of the caller's, ZSTD_CCtx_setParameter,
                    * ZSTD_compress2, ZSTD_isError}, args {level, checksum} */

/* libzstd's ZSTD_c_compressionLevel and ZSTD_c_checksumFlag (zstd.h, stable API). */
#define CZ_ZSTD_LEVEL 100
#define CZ_ZSTD_CHECKSUM 201

typedef size_t (*cz_zstd_set_fn)(void *, int, int);
typedef size_t (*cz_zstd_compress2_fn)(void *, void *, size_t, const void *, size_t);

/* A helper thread's memory (cz_pool). */
typedef struct cz_helper cz_helper;

/*
 * Work a call shares with the helpers it is lent (cz_pool): run is what a helper that takes a
 * seat at it does (with its own memory h); the job's own fields follow (cz_boxes,
 * cz_blosc_split start with this).
 */
typedef struct cz_job cz_job;
struct cz_job {
    void (*run)(cz_job *job, cz_helper *h);
    int seated;                 /* helpers working on this job (under cz_pool.mu) */
    int caller_cpu;             /* the CPU the caller opened the job on; -1: unknown */
};

/* One put_boxes call: its boxes, shared by the calling thread and the helpers it is lent. */
typedef struct {
    cz_job base;
    int64_t n;                  /* boxes */
    const char *const *paths;   /* each box's path */
    const char *tag, *suffix;   /* of the temporary names (cz_temp_name) */
    int64_t first;
    const int64_t *sources;     /* each box's first element */
    int32_t ndim;
    const int64_t *extent, *src_strides, *box_strides;
    int64_t itemsize, nbytes;   /* of an element, of a box */
    int c_order;                /* every box is one contiguous run (no copy) */
    int32_t kind;               /* CZ_STORE, CZ_BLOSC, CZ_ZSTD */
    const int64_t *fns, *args;
    const char *cname;
    int64_t packed_size;        /* room for one compressed box */
    int32_t exchange;
    int64_t exchange_min;
    int64_t *status;
    int64_t next;               /* the next box to take (__atomic) */
    int64_t failed;             /* boxes not written (__atomic) */
} cz_boxes;

/* A thread's memory for cz_boxes_run: a box in C order, a compressed box, a zstd context. */
typedef struct {
    uint8_t *scratch;
    uint8_t *packed;
    void *cctx;
} cz_tools;

/* Set a zstd context to numcodecs' parameters for job: 0, else -1. */
static int cz_zstd_prepare(const cz_boxes *job, void *cctx)
{
    cz_zstd_set_fn set = (cz_zstd_set_fn)(intptr_t)job->fns[1];
    cz_zstd_iserror_fn iserror = (cz_zstd_iserror_fn)(intptr_t)job->fns[3];
    if (cctx == NULL || iserror(set(cctx, CZ_ZSTD_LEVEL, (int)job->args[0])) ||
        iserror(set(cctx, CZ_ZSTD_CHECKSUM, (int)job->args[1]))) {
        return -1;
    }
    return 0;
}

/* Encode and write box i of job with the memory t: its status (see put_boxes). */
static int64_t cz_box(const cz_boxes *job, const cz_tools *t, int64_t i, char *tmp,
                      int32_t *exchange)
{
    const uint8_t *data = (const uint8_t *)(intptr_t)job->sources[i];
    int64_t size = job->nbytes;
    if (!job->c_order) {
        cz_copy_strided(data, job->src_strides, t->scratch, job->box_strides, job->ndim,
                        job->itemsize, job->extent, 0);
        data = t->scratch;
    }
    if (job->kind == CZ_BLOSC) {
        const int64_t *args = job->args;
        int got = ((cz_compress_fn)(intptr_t)job->fns[0])(
            (int)args[0], (int)args[1], (size_t)args[2], (size_t)size, data, t->packed,
            (size_t)(size + 16), job->cname, (size_t)args[3], 1);
        if (got <= 0) {
            return CZ_NOT_ENCODED;
        }
        data = t->packed;
        size = got;
    } else if (job->kind == CZ_ZSTD) {
        size_t got = ((cz_zstd_compress2_fn)(intptr_t)job->fns[2])(
            t->cctx, t->packed, (size_t)job->packed_size, data, (size_t)size);
        if (((cz_zstd_iserror_fn)(intptr_t)job->fns[3])(got)) {
            return CZ_NOT_ENCODED;
        }
        data = t->packed;
        size = (int64_t)got;
    }
    int32_t r = cz_temp_name(tmp, job->paths[i], job->tag, job->first + i, job->suffix);
    if (r == 0) {
        r = cz_put_one(job->paths[i], tmp, data, size, exchange, job->exchange_min);
    }
    return r;
}

/* Take boxes of job one at a time until none is left, encoding and writing each with t. */
static void cz_boxes_run(cz_boxes *job, const cz_tools *t)
{
    char tmp[CZ_NAME_MAX];
    int32_t exchange = job->exchange; /* a refusal to swap stops this thread's swaps */
    int64_t failed = 0;
    for (;;) {
        int64_t i = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED);
        if (i >= job->n) {
            break;
        }
        int64_t r = cz_box(job, t, i, tmp, &exchange);
        job->status[i] = r;
        failed += r < 0;
    }
    __atomic_fetch_add(&job->failed, failed, __ATOMIC_RELAXED);
}

/*
 * The helpers: threads of this library that take boxes of a put_boxes call alongside its
 * caller, so a small write uses the threads it is allowed without the wake-up of a Python
 * thread (which must also take the GIL: measured 250-500 us late on a 2-core VM, a condition
 * variable here ~25 us). Made on first use, up to CZ_HELPERS_MAX, and kept (asleep) for the
 * process; one call at a time is helped (a call finding them busy runs alone). A call never
 * waits for a helper to wake: it closes its job when its boxes are taken and waits only for
 * the helpers that took a seat at it, each finishing the box it holds. A call may open its job
 * while helpers of a closed one still finish theirs, so each job counts its own seated helpers
 * and the helper leaving a job's last seat wakes every closing call, each waiting for its own
 * count (one count for the pool, with one wake-up, once left a second closing call asleep for
 * good). Helpers block every signal (they go to the process's own threads) and are forgotten
 * in a forked child (pthread_atfork).
 */
#define CZ_HELPERS_MAX 15

/* Helper memory kept between calls up to this size (as _native's _KEEP_SCRATCH). */
#define CZ_KEEP_SCRATCH ((int64_t)16 << 20)

struct cz_helper {
    cz_tools tools;
    int64_t scratch_size, packed_size;
    cz_zstd_create_fn create; /* the library that made tools.cctx, and its free */
    cz_zstd_free_fn release;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t wake; /* a job has open seats */
    pthread_cond_t done; /* a job's last seated helper left */
    cz_job *job;         /* the open job, or NULL */
    int seats;           /* helpers the open job may still take */
    int started;
    cz_helper helpers[CZ_HELPERS_MAX];
} cz_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};

static pthread_once_t cz_pool_once = PTHREAD_ONCE_INIT;

static void cz_pool_prepare(void) { pthread_mutex_lock(&cz_pool.mu); }

static void cz_pool_parent(void) { pthread_mutex_unlock(&cz_pool.mu); }

/*
 * In a forked child: no helper runs there, and the pool starts over. Their memory is forgotten,
 * not freed: a helper of the parent may have been between freeing its zstd context and making
 * the next one when the process forked, and the pages are the parent's, shared until written.
 */
static void cz_pool_child(void)
{
    memset(cz_pool.helpers, 0, sizeof cz_pool.helpers);
    cz_pool.job = NULL;
    cz_pool.seats = cz_pool.started = 0;
    pthread_mutex_init(&cz_pool.mu, NULL);
    pthread_cond_init(&cz_pool.wake, NULL);
    pthread_cond_init(&cz_pool.done, NULL);
}

static void cz_pool_init(void) { pthread_atfork(cz_pool_prepare, cz_pool_parent, cz_pool_child); }

/* Room of at least size bytes at *buf (holding *have): 0, else -1 (*buf unchanged). */
static int cz_room(uint8_t **buf, int64_t *have, int64_t size)
{
    if (*have >= size) {
        return 0;
    }
    uint8_t *got = malloc((size_t)(size > 0 ? size : 1));
    if (got == NULL) {
        return -1;
    }
    free(*buf);
    *buf = got;
    *have = size;
    return 0;
}

/* Make h ready for job (memory, a zstd context of job's library): 0, else -1. */
static int cz_helper_ready(cz_helper *h, const cz_boxes *job)
{
    if ((!job->c_order && cz_room(&h->tools.scratch, &h->scratch_size, job->nbytes) != 0) ||
        (job->kind != CZ_STORE && cz_room(&h->tools.packed, &h->packed_size, job->packed_size))) {
        return -1;
    }
    if (job->kind != CZ_ZSTD) {
        return 0;
    }
    cz_zstd_create_fn create = (cz_zstd_create_fn)(intptr_t)job->fns[4];
    if (h->create != create) {
        if (h->tools.cctx != NULL) {
            h->release(h->tools.cctx);
        }
        h->tools.cctx = create();
        h->create = h->tools.cctx != NULL ? create : NULL;
        h->release = (cz_zstd_free_fn)(intptr_t)job->fns[5];
    }
    return cz_zstd_prepare(job, h->tools.cctx);
}

/* A helper's part of a put_boxes job: boxes, with memory made ready for them. */
static void cz_boxes_help(cz_job *base, cz_helper *h)
{
    cz_boxes *job = (cz_boxes *)base;
    if (cz_helper_ready(h, job) == 0) {
        cz_boxes_run(job, &h->tools);
    }
}

/* Let go of memory above CZ_KEEP_SCRATCH after a job. */
static void cz_helper_trim(cz_helper *h)
{
    if (h->scratch_size > CZ_KEEP_SCRATCH) {
        free(h->tools.scratch);
        h->tools.scratch = NULL;
        h->scratch_size = 0;
    }
    if (h->packed_size > CZ_KEEP_SCRATCH) {
        free(h->tools.packed);
        h->tools.packed = NULL;
        h->packed_size = 0;
    }
}

/*
 * Where a woken helper runs is the kernel's choice, and it is not always a free CPU: measured on
 * the 2-core development VM (Linux 6.18, Firecracker), a put_boxes call of 8 boxes made from the
 * main thread had its helper on the other CPU (1.7-1.9 ms), but the same call made from a thread
 * the main thread had just handed it to (as zarr's synchronous API runs every call, on its
 * loop's thread) mostly found its helper queued on the caller's own CPU: woken 0.8-3.5 ms late,
 * or preempting the caller and taking every box, 2.8-3.3 ms either way. So the caller yields
 * once after opening its job (nothing to do when no helper waits on its CPU), and a helper that
 * finds itself on the caller's CPU narrows its affinity to the other CPUs it may use for the
 * job (the kernel moves it at once) and restores it after. A process confined to one CPU keeps
 * everything as it is.
 */
#ifdef __linux__
typedef cpu_set_t cz_cpus;

static int cz_current_cpu(void) { return sched_getcpu(); }

/* Leave cpu, the calling thread's current one, for the job: 1 (kept holds the old affinity to
 * restore), else 0 (not on cpu, no other allowed CPU, or the kernel refused: nothing changed). */
static int cz_leave_cpu(int cpu, cz_cpus *kept)
{
    if (cpu < 0 || sched_getcpu() != cpu || sched_getaffinity(0, sizeof *kept, kept) != 0) {
        return 0;
    }
    cpu_set_t other = *kept;
    CPU_CLR(cpu, &other);
    return CPU_COUNT(&other) > 0 && sched_setaffinity(0, sizeof other, &other) == 0;
}

static void cz_restore_cpus(const cz_cpus *kept) { (void)sched_setaffinity(0, sizeof *kept, kept); }
#else
typedef int cz_cpus;

static int cz_current_cpu(void) { return -1; }

static int cz_leave_cpu(int cpu, cz_cpus *kept)
{
    (void)cpu;
    (void)kept;
    return 0;
}

static void cz_restore_cpus(const cz_cpus *kept) { (void)kept; }
#endif

/*
 * Lending: how many of the helpers its caller offers a call takes (cz_set_lending). A split read
 * of one Blosc chunk (cz_read_blosc_split) only gains where its helpers find idle CPUs: under
 * Dask, with one chunk a task, every worker thread reads at once and the helpers only queue for
 * the CPUs, each caller then waiting for the part its helper holds (measured on the 2-core
 * development VM: a Dask sum over a Blosc-zstd array of 512 KiB chunks, one chunk a task, 2
 * threads, 421-426 ms lending always, 345 ms lending on idle CPUs, 340 ms never). CZ_LEND_IDLE
 * (the default): such a read takes at most the CPUs the calling thread may run on less the
 * threads running on the system now (the fourth field of /proc/loadavg, the caller itself
 * included; ~1.3 us to read; as offered where it cannot be read). put_boxes takes what it is
 * offered in this mode: measured the same way (Dask to_zarr, lz4 chunks, two 512 KiB chunks a
 * task, 2 threads), lending on every call 171 ms, never 172 ms, but lending only where a CPU was
 * idle 193 ms (a third of the calls lent; why the mix is slower than either is not settled).
 * CZ_LEND_ALWAYS: every call as offered; CZ_LEND_NEVER: none.
 */
enum { CZ_LEND_IDLE = 0, CZ_LEND_ALWAYS = 1, CZ_LEND_NEVER = 2 };

static int cz_lending = CZ_LEND_IDLE;

/* Set the lending mode; returns the previous one, or -1 (nothing changed) for another value. */
int32_t cz_set_lending(int32_t mode)
{
    if (mode < CZ_LEND_IDLE || mode > CZ_LEND_NEVER) {
        return -1;
    }
    return __atomic_exchange_n(&cz_lending, mode, __ATOMIC_RELAXED);
}

/* The threads running on the system now (/proc/loadavg's "running/total"); -1 unknown. */
int32_t cz_running_threads(void)
{
#ifdef __linux__
    char text[160];
    int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    ssize_t got;
    do {
        got = read(fd, text, sizeof text - 1);
    } while (got < 0 && errno == EINTR);
    close(fd);
    if (got <= 0) {
        return -1;
    }
    text[got] = '\0';
    const char *p = text;
    for (int fields = 0; fields < 3; fields++) { /* the three load averages */
        p = strchr(p, ' ');
        if (p == NULL) {
            return -1;
        }
        p++;
    }
    int32_t running = 0;
    const char *digits = p;
    while (*p >= '0' && *p <= '9' && running < 1000000) {
        running = running * 10 + (*p++ - '0');
    }
    return p > digits && *p == '/' ? running : -1;
#else
    return -1;
#endif
}

/* Of want helpers offered, how many a call may take now: watch_cpus for the calls that look for
 * idle CPUs in CZ_LEND_IDLE (see above). */
static int64_t cz_lendable(int64_t want, int watch_cpus)
{
    int mode = __atomic_load_n(&cz_lending, __ATOMIC_RELAXED);
    if (want <= 0 || mode == CZ_LEND_NEVER) {
        return 0;
    }
    if (mode == CZ_LEND_ALWAYS || !watch_cpus) {
        return want;
    }
#ifdef __linux__
    cpu_set_t mine;
    int32_t running = cz_running_threads();
    if (running < 0 || sched_getaffinity(0, sizeof mine, &mine) != 0) {
        return want;
    }
    int64_t idle = (int64_t)CPU_COUNT(&mine) - running;
    return idle <= 0 ? 0 : (idle < want ? idle : want);
#else
    return want;
#endif
}

/*
 * For tests: cz_leave_cpu on the calling thread's current CPU, then cz_restore_cpus. Bits: 1
 * it left, 2 it then ran on another CPU, 4 its affinity afterwards equals the one before.
 */
int cz_leave_cpu_probe(void)
{
    int result = 0;
#ifdef __linux__
    cpu_set_t before, after;
    if (sched_getaffinity(0, sizeof before, &before) != 0) {
        return -1;
    }
    int cpu = sched_getcpu();
    cz_cpus kept;
    if (cz_leave_cpu(cpu, &kept)) {
        result |= 1;
        if (sched_getcpu() != cpu) {
            result |= 2;
        }
        cz_restore_cpus(&kept);
    }
    if (sched_getaffinity(0, sizeof after, &after) == 0 && CPU_EQUAL(&before, &after)) {
        result |= 4;
    }
#endif
    return result;
}

static void *cz_helper_main(void *arg)
{
    cz_helper *h = arg;
    pthread_mutex_lock(&cz_pool.mu);
    for (;;) {
        while (cz_pool.job == NULL || cz_pool.seats == 0) {
            pthread_cond_wait(&cz_pool.wake, &cz_pool.mu);
        }
        cz_job *job = cz_pool.job;
        cz_pool.seats--;
        job->seated++;
        pthread_mutex_unlock(&cz_pool.mu);
        cz_cpus kept;
        int moved = cz_leave_cpu(job->caller_cpu, &kept);
        job->run(job, h);
        if (moved) {
            cz_restore_cpus(&kept);
        }
        cz_helper_trim(h);
        pthread_mutex_lock(&cz_pool.mu);
        if (--job->seated == 0) { /* job may end once the lock is let go: not touched again */
            pthread_cond_broadcast(&cz_pool.done);
        }
    }
    return NULL;
}

/* Open job to up to want helpers (made as needed): how many were called (0: runs alone). */
static int cz_pool_open(cz_job *job, int want)
{
    if (want <= 0) {
        return 0;
    }
    if (want > CZ_HELPERS_MAX) {
        want = CZ_HELPERS_MAX;
    }
    pthread_once(&cz_pool_once, cz_pool_init);
    pthread_mutex_lock(&cz_pool.mu);
    if (cz_pool.job != NULL) {
        pthread_mutex_unlock(&cz_pool.mu);
        return 0;
    }
    if (cz_pool.started < want) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old); /* inherited by the new threads */
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        while (cz_pool.started < want) {
            pthread_t thread;
            if (pthread_create(&thread, &attr, cz_helper_main,
                               &cz_pool.helpers[cz_pool.started]) != 0) {
                break;
            }
            cz_pool.started++;
        }
        pthread_attr_destroy(&attr);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (want > cz_pool.started) {
            want = cz_pool.started;
        }
    }
    if (want > 0) {
        cz_pool.job = job;
        cz_pool.seats = want;
        for (int k = 0; k < want; k++) {
            pthread_cond_signal(&cz_pool.wake);
        }
    }
    pthread_mutex_unlock(&cz_pool.mu);
    return want;
}

/* Close job (no helper takes a seat at it after this) and wait for its seated ones to finish. */
static void cz_pool_close(cz_job *job)
{
    pthread_mutex_lock(&cz_pool.mu);
    if (cz_pool.job == job) {
        cz_pool.job = NULL;
        cz_pool.seats = 0;
    }
    while (job->seated > 0) {
        pthread_cond_wait(&cz_pool.done, &cz_pool.mu);
    }
    pthread_mutex_unlock(&cz_pool.mu);
}

/* blosc_getitem(src, start, nitems, dest) of c-blosc 1 (thread-safe there: a context of its own
 * per call). */
typedef int (*cz_getitem_fn)(const void *, int, int, void *);

/*
 * One blosc chunk read by a call that has helpers to lend (cz_read_blosc_split): the box is cut
 * into parts along its first axis longer than one element, at blosc block boundaries where it
 * can be, and each part is taken by one thread (the caller or a helper), which decodes the
 * chunk's bytes the part reads (blosc_getitem: only the blocks holding them) into the chunk's
 * buffer and copies its part of the box from there, or straight into the output where the box
 * is the whole chunk over a contiguous region of it (cz_whole_region). No thread reads bytes
 * another decoded.
 */
typedef struct {
    cz_job base;
    cz_getitem_fn getitem;
    const uint8_t *src;
    uint8_t *chunk;             /* the decoded chunk (C order) */
    uint8_t *whole;             /* the chunk's region of out where it is decoded in place */
    const int64_t *chunk_shape, *box, *out_strides;
    uint8_t *out;
    int32_t ndim, axis;
    int64_t itemsize, typesize; /* of an element, of blosc's items */
    int streaming;
    int64_t parts, cut[CZ_HELPERS_MAX + 2]; /* part p: box elements cut[p] .. cut[p+1] on axis */
    int64_t prefix;             /* chunk bytes before the box's first element on axis */
    int64_t axis_stride;        /* the chunk's byte stride along axis */
    int64_t head, tail;         /* an axis element's first byte read, one past its last */
    int64_t next;               /* the next part to take (__atomic) */
    int64_t failed;             /* parts not placed (__atomic) */
} cz_blosc_split;

/* The chunk's bytes that box elements i0 .. i1 - 1 along s->axis read: [*lo, *hi). */
static void cz_blosc_span(const cz_blosc_split *s, int64_t i0, int64_t i1, int64_t *lo,
                          int64_t *hi)
{
    const int64_t *box = s->box, *step = box + 3 * s->ndim;
    *lo = s->prefix + (box[s->axis] + i0 * step[s->axis]) * s->axis_stride + s->head;
    *hi = s->prefix + (box[s->axis] + (i1 - 1) * step[s->axis]) * s->axis_stride + s->tail;
}

/* Take parts of s until none is left: decode what each reads, copy it into the output. */
static void cz_blosc_split_run(cz_blosc_split *s)
{
    const int32_t nd = s->ndim, ax = s->axis;
    const int64_t *box = s->box;
    int64_t start[CZ_MAX_DIMS], at[CZ_MAX_DIMS], extent[CZ_MAX_DIMS];
    memcpy(start, box, (size_t)nd * sizeof *start);
    memcpy(at, box + nd, (size_t)nd * sizeof *at);
    memcpy(extent, box + 2 * nd, (size_t)nd * sizeof *extent);
    const int64_t *step = box + 3 * nd;
    int64_t failed = 0;
    for (;;) {
        int64_t p = __atomic_fetch_add(&s->next, 1, __ATOMIC_RELAXED);
        if (p >= s->parts) {
            break;
        }
        int64_t i0 = s->cut[p], i1 = s->cut[p + 1], lo, hi;
        cz_blosc_span(s, i0, i1, &lo, &hi);
        int64_t items = (hi - lo) / s->typesize;
        uint8_t *dst = (s->whole != NULL ? s->whole : s->chunk) + lo;
        if (s->getitem(s->src, (int)(lo / s->typesize), (int)items, dst) != hi - lo) {
            failed++;
            continue;
        }
        if (s->whole != NULL) {
            continue;
        }
        start[ax] = box[ax] + i0 * step[ax];
        at[ax] = box[nd + ax] + i0;
        extent[ax] = i1 - i0;
        cz_copy_box(s->chunk, s->chunk_shape, nd, s->itemsize, start, at, extent, step, s->out,
                    s->out_strides, s->streaming);
    }
#if defined(__SSE2__)
    if (s->streaming) {
        _mm_sfence();
    }
#endif
    __atomic_fetch_add(&s->failed, failed, __ATOMIC_RELAXED);
}

/* A helper's part of a split blosc read. */
static void cz_blosc_split_help(cz_job *base, cz_helper *h)
{
    (void)h;
    cz_blosc_split_run((cz_blosc_split *)base);
}

/* Chunks read split (for tests: cz_split_reads). */
static int64_t cz_splits;

/* How many chunks cz_read_blosc_split has read with its parts on several threads. */
int64_t cz_split_reads(void) { return __atomic_load_n(&cz_splits, __ATOMIC_RELAXED); }

/* cz_read_blosc_split's block: its integer arguments, then its arrays, one int64 each. */
enum {
    CZ_BS_GETITEM, CZ_BS_CAP, CZ_BS_NBYTES, CZ_BS_NDIM, CZ_BS_ITEMSIZE, CZ_BS_SCRATCH, CZ_BS_OUT,
    CZ_BS_STREAMING, CZ_BS_HELPERS, CZ_BS_HEAD
};

/*
 * Read the blosc 1 chunk in the file path (one frame of a C-ordered chunk of nbytes bytes), and
 * copy a box of it into out, its decoding and copying shared by the calling thread and up to
 * helpers of this library's helper threads (see cz_blosc_split). block holds the CZ_BS_*
 * integers (blosc_getitem's address; cap: a file of cap bytes or more is left to the caller;
 * scratch: cap + nbytes bytes, the stored chunk then the decoded one; streaming as
 * cz_read_zstd_boxes'), then chunk_shape[ndim], out_shape[ndim], out_strides[ndim] and the box
 * (chunk start, out start, extent, chunk step; ndim values each, as cz_read_zstd_boxes').
 * The frame is checked as cuzarr.codecs.blosc_batch checks one (its header's compressed size is
 * the file's, its decoded size nbytes) before anything is decoded. Returns 1 placed, 0 the file
 * does not exist, -1 not done here (another error, a file too large, a frame that is not one
 * or does not decode, a block size the parts cannot be cut at: the caller reads the chunk the
 * general way; the box's region of out may have been written), -2 arguments it refuses or a
 * box outside the chunk or the output (nothing done).
 */
int64_t cz_read_blosc_split(const int64_t *block, const char *path)
{
    int64_t ndim = block[CZ_BS_NDIM], nbytes = block[CZ_BS_NBYTES], cap = block[CZ_BS_CAP];
    int64_t itemsize = block[CZ_BS_ITEMSIZE];
    if (ndim < 1 || ndim > CZ_MAX_DIMS || nbytes < 1 || cap < 17 || itemsize < 1 ||
        block[CZ_BS_HELPERS] < 0 || block[CZ_BS_GETITEM] == 0 || nbytes > INT32_MAX) {
        return -2;
    }
    const int64_t *chunk_shape = block + CZ_BS_HEAD, *out_shape = chunk_shape + ndim;
    const int64_t *out_strides = out_shape + ndim, *box = out_strides + ndim;
    if (cz_check_box(chunk_shape, out_shape, (int32_t)ndim, box) != 0) {
        return -2;
    }
    uint8_t *stored = (uint8_t *)(intptr_t)block[CZ_BS_SCRATCH];
    int64_t got = cz_read_file(path, stored, cap);
    if (got == CZ_NO_FILE) {
        return 0;
    }
    if (got < 16) { /* -1: unreadable or too large; under 16 bytes: no blosc header */
        return -1;
    }
    /* blosc 1's header: version, versionlz, flags, typesize, then nbytes, blocksize, cbytes. */
    uint32_t head[3];
    memcpy(head, stored + 4, sizeof head); /* little-endian, as the machines cuzarr builds on */
    int64_t typesize = stored[3], blocksize = head[1];
    if (head[0] != (uint32_t)nbytes || head[2] != (uint32_t)got || typesize < 1 ||
        blocksize < 1 || blocksize % typesize != 0 || blocksize % itemsize != 0) {
        return -1;
    }
    cz_blosc_split s = {
        .getitem = (cz_getitem_fn)(intptr_t)block[CZ_BS_GETITEM], .src = stored,
        .chunk = stored + cap, .chunk_shape = chunk_shape, .box = box, .out_strides = out_strides,
        .out = (uint8_t *)(intptr_t)block[CZ_BS_OUT], .ndim = (int32_t)ndim, .axis = -1,
        .itemsize = itemsize, .typesize = typesize, .streaming = (int)block[CZ_BS_STREAMING],
    };
    int64_t strides[CZ_MAX_DIMS];
    cz_c_strides(chunk_shape, (int32_t)ndim, itemsize, strides);
    s.whole = cz_whole_region(chunk_shape, (int32_t)ndim, itemsize, box, s.out, out_strides);
    for (int32_t d = 0; d < ndim; d++) {
        int64_t extent = box[2 * ndim + d];
        if (extent == 0) {
            return 1; /* nothing to copy */
        }
        if (s.axis < 0 && (extent > 1 || d == ndim - 1)) {
            s.axis = d;
        } else if (s.axis < 0) {
            s.prefix += box[d] * strides[d];
        }
    }
    s.axis_stride = strides[s.axis];
    /* Within an element along the axis, the box reads from head to tail (C order). */
    s.tail = itemsize;
    for (int32_t d = (int32_t)ndim - 1; d > s.axis; d--) {
        s.head += box[d] * strides[d];
        s.tail += (box[d] + (box[2 * ndim + d] - 1) * box[3 * ndim + d]) * strides[d];
    }
    /* Parts: one per thread, each cut at the element that costs least: a block decoded twice
     * (the cut's first byte inside a block: both sides decode it) or elements away from an
     * even share, in bytes. */
    int64_t want = 1 + cz_lendable(block[CZ_BS_HELPERS] < CZ_HELPERS_MAX ? block[CZ_BS_HELPERS]
                                                                          : CZ_HELPERS_MAX,
                                   1);
    const int64_t total = box[2 * ndim + s.axis];
    if (want > total) {
        want = total;
    }
    s.cut[0] = 0;
    s.parts = 0;
    for (int64_t p = 1; p < want; p++) {
        int64_t aim = total * p / want, best = aim, least = INT64_MAX;
        for (int64_t i = s.cut[s.parts] + 1; i < total; i++) {
            int64_t lo, hi;
            cz_blosc_span(&s, i, i + 1, &lo, &hi);
            int64_t cost = (lo % blocksize != 0 ? blocksize : 0) +
                           (i > aim ? i - aim : aim - i) * s.axis_stride;
            if (cost < least) {
                least = cost;
                best = i;
            }
        }
        if (best > s.cut[s.parts] && best < total) {
            s.cut[++s.parts] = best;
        }
    }
    s.cut[++s.parts] = total;
    /* Every part's span must start and end on blosc items (getitem's unit). */
    for (int64_t p = 0; p < s.parts; p++) {
        int64_t lo, hi;
        cz_blosc_span(&s, s.cut[p], s.cut[p + 1], &lo, &hi);
        if (lo % typesize != 0 || hi % typesize != 0 || hi > nbytes) {
            return -1;
        }
    }
    s.base.run = cz_blosc_split_help;
    s.base.caller_cpu = cz_current_cpu();
    int called = s.parts > 1 ? cz_pool_open(&s.base, (int)(s.parts - 1)) : 0;
    if (called) {
        sched_yield(); /* as put_boxes: a helper woken onto this CPU moves off it */
    }
    cz_blosc_split_run(&s);
    if (called) {
        cz_pool_close(&s.base);
    }
    if (s.failed) {
        return -1;
    }
    if (s.parts > 1) {
        __atomic_fetch_add(&cz_splits, 1, __ATOMIC_RELAXED);
    }
    return 1;
}

/* Most paths put_boxes keeps on its stack (more: one allocation). */
#define CZ_STACK_PATHS 64

/*
 * Encode n boxes of an array and write each to its file atomically, in one call: per box, a
 * copy into C order (cz_copy_strided: the box's first element at the address sources[i], extent
 * and byte strides shared by every box; no copy where the box is one contiguous run), then the
 * compressor kind (CZ_STORE, CZ_BLOSC, CZ_ZSTD above, with the function addresses fns and the
 * integer arguments args), then the write and move of cz_put_files (same temporary names, same
 * status values). scratch has room for the box (nbytes = itemsize x the extent's elements);
 * packed has packed_size bytes for a compressed box: c-blosc is given exactly nbytes + 16, as
 * numcodecs gives it (c-blosc keeps a block as it is where its compressed form would not fit,
 * so more room would change the frame); libzstd all of packed, which must hold
 * ZSTD_compressBound(nbytes) (then the frame does not depend on the room). The zstd frames are
 * numcodecs' (a context with its two parameters set, ZSTD_compress2): the caller's context, one
 * per thread reused from call to call (a new one per call allocates its workspace again: 13 %
 * of a write of 8 KiB chunks); fns for zstd are {that context, ZSTD_CCtx_setParameter,
 * ZSTD_compress2, ZSTD_isError, ZSTD_createCCtx, ZSTD_freeCCtx}. A box the compressor refuses
 * gets status CZ_NOT_ENCODED: the caller encodes it the general way, which names the problem.
 * Up to helpers of this library's helper threads take boxes too (see cz_pool); the boxes are
 * the same whichever thread writes them. Returns how many were not written, -1 for arguments
 * it refuses (nothing done).
 */
static int64_t put_boxes(int64_t n, const char *paths, const char *tag, int64_t first,
                         const char *suffix, const int64_t *sources, int32_t ndim,
                         const int64_t *extent, const int64_t *src_strides, int64_t itemsize,
                         int32_t kind, const int64_t *fns, int64_t nfns, const int64_t *args,
                         const char *cname, uint8_t *scratch, int64_t scratch_size,
                         uint8_t *packed, int64_t packed_size, int32_t exchange,
                         int64_t exchange_min, int32_t helpers, int64_t *status)
{
    if (ndim < 1 || ndim > CZ_MAX_DIMS || itemsize < 1 || kind < CZ_STORE || kind > CZ_ZSTD ||
        (kind == CZ_ZSTD && nfns < 6) || (kind == CZ_BLOSC && nfns < 1) || helpers < 0) {
        return -1;
    }
    int64_t nbytes = itemsize;
    int c_order = 1; /* the source box is one contiguous run (no copy needed) */
    for (int32_t d = ndim - 1; d >= 0; d--) {
        if (extent[d] < 0) {
            return -1;
        }
        if (extent[d] > 1 && src_strides[d] != nbytes) {
            c_order = 0;
        }
        nbytes *= extent[d];
    }
    if (scratch_size < nbytes || (kind == CZ_BLOSC && packed_size < nbytes + 16)) {
        return -1;
    }
    cz_boxes job = {
        .n = n, .tag = tag, .suffix = suffix, .first = first, .sources = sources, .ndim = ndim,
        .extent = extent, .src_strides = src_strides, .itemsize = itemsize, .nbytes = nbytes,
        .c_order = c_order, .kind = kind, .fns = fns, .args = args, .cname = cname,
        .packed_size = packed_size, .exchange = exchange, .exchange_min = exchange_min,
        .status = status,
    };
    cz_tools mine = {scratch, packed, kind == CZ_ZSTD ? (void *)(intptr_t)fns[0] : NULL};
    if (kind == CZ_ZSTD && cz_zstd_prepare(&job, mine.cctx) != 0) {
        return -1;
    }
    int64_t box_strides[CZ_MAX_DIMS];
    cz_c_strides(extent, ndim, itemsize, box_strides);
    job.box_strides = box_strides;
    const char *on_stack[CZ_STACK_PATHS];
    const char **names = n <= CZ_STACK_PATHS ? on_stack : malloc((size_t)n * sizeof *names);
    if (names == NULL) {
        return -1;
    }
    const char *path = paths;
    for (int64_t i = 0; i < n; i++, path += strlen(path) + 1) {
        names[i] = path;
    }
    job.paths = names;
    job.base.run = cz_boxes_help;
    job.base.caller_cpu = cz_current_cpu();
    int called =
        n > 1 ? cz_pool_open(&job.base, (int)cz_lendable(helpers < n - 1 ? helpers : n - 1, 0)) : 0;
    if (called) {
        sched_yield(); /* a helper woken onto this CPU runs now, and moves off it (cz_leave_cpu) */
    }
    cz_boxes_run(&job, &mine);
    if (called) {
        cz_pool_close(&job.base);
    }
    if (names != on_stack) {
        free(names);
    }
    return job.failed;
}

/* cz_put_boxes' block: its integer arguments, then its arrays, one int64 each. */
enum {
    CZ_PB_N, CZ_PB_FIRST, CZ_PB_NDIM, CZ_PB_ITEMSIZE, CZ_PB_KIND, CZ_PB_EXCHANGE,
    CZ_PB_EXCHANGE_MIN, CZ_PB_SCRATCH, CZ_PB_SCRATCH_SIZE, CZ_PB_PACKED, CZ_PB_PACKED_SIZE,
    CZ_PB_TAG, CZ_PB_SUFFIX, CZ_PB_CNAME, CZ_PB_NFNS, CZ_PB_NARGS, CZ_PB_HELPERS, CZ_PB_HEAD
};

/*
 * put_boxes above with its arguments in one block (ctypes converts each argument of a call:
 * 21 cost ~70 us after the caches were flushed, a small write's Python budget). block holds
 * the CZ_PB_* integers, then sources[n], extent[ndim], src_strides[ndim], fns[nfns],
 * args[nargs], and n status words the call fills in. strings holds the n paths, each ended
 * by a NUL byte, from its start; tag, suffix and cname are NUL-ended at the offsets the block
 * gives. Returns put_boxes' value (-1: arguments refused, nothing done).
 */
int64_t cz_put_boxes(int64_t *block, const char *strings)
{
    int64_t n = block[CZ_PB_N], ndim = block[CZ_PB_NDIM];
    if (n < 0 || ndim < 1 || ndim > CZ_MAX_DIMS || block[CZ_PB_NFNS] < 0 ||
        block[CZ_PB_NARGS] < 0 || block[CZ_PB_EXCHANGE] < 0 || block[CZ_PB_EXCHANGE] > 1 ||
        block[CZ_PB_HELPERS] < 0 || block[CZ_PB_HELPERS] > CZ_HELPERS_MAX) {
        return -1;
    }
    const int64_t *sources = block + CZ_PB_HEAD;
    const int64_t *extent = sources + n;
    const int64_t *strides = extent + ndim;
    const int64_t *fns = strides + ndim;
    const int64_t *args = fns + block[CZ_PB_NFNS];
    int64_t *status = (int64_t *)(args + block[CZ_PB_NARGS]);
    return put_boxes(n, strings, strings + block[CZ_PB_TAG], block[CZ_PB_FIRST],
                     strings + block[CZ_PB_SUFFIX], sources, (int32_t)ndim, extent, strides,
                     block[CZ_PB_ITEMSIZE], (int32_t)block[CZ_PB_KIND], fns, block[CZ_PB_NFNS], args,
                     strings + block[CZ_PB_CNAME], (uint8_t *)(intptr_t)block[CZ_PB_SCRATCH],
                     block[CZ_PB_SCRATCH_SIZE], (uint8_t *)(intptr_t)block[CZ_PB_PACKED],
                     block[CZ_PB_PACKED_SIZE], (int32_t)block[CZ_PB_EXCHANGE],
                     block[CZ_PB_EXCHANGE_MIN], (int32_t)block[CZ_PB_HELPERS], status);
}
