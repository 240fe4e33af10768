/*
 * cuzarr's batch helper: loops over many small chunks in C, so that the Python caller crosses
 * into C (and releases the GIL, through ctypes) once per batch instead of once per chunk.
 *
 * It holds no codec. The codec functions are passed in as pointers: c-blosc's thread-safe
 * entry points (blosc_decompress_ctx, blosc_compress_ctx) and libzstd's decoder
 * (ZSTD_createDCtx, ZSTD_decompressDCtx, ...) as exported by the libraries numcodecs ships, looked up by
 * cuzarr.codecs.blosc_batch and cuzarr.codecs.zstd_batch. Plain C99, no Python headers: it is
 * loaded with ctypes, so one build serves every Python version.
 *
 * Built by hatch_build.py when cuzarr is installed (cc -O2 -shared -fPIC).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* int blosc_decompress_ctx(const void *src, void *dest, size_t destsize, int numinternalthreads) */
typedef int (*cz_decompress_fn)(const void *, void *, size_t, int);

/* int blosc_compress_ctx(int clevel, int doshuffle, size_t typesize, size_t nbytes,
 *                        const void *src, void *dest, size_t destsize, const char *compressor,
 *                        size_t blocksize, int numinternalthreads) */
typedef int (*cz_compress_fn)(int, int, size_t, size_t, const void *, void *, size_t,
                              const char *, size_t, int);

/* The ABI version Python checks before using the library (bump on any signature change). */
int cz_abi_version(void) { return 6; }

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
