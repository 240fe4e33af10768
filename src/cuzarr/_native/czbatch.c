/*
 * cuzarr's batch helper: loops over many small chunks in C, so that the Python caller crosses
 * into C (and releases the GIL, through ctypes) once per batch instead of once per chunk.
 *
 * It holds no codec. The codec functions are passed in as pointers: c-blosc's thread-safe
 * entry points (blosc_decompress_ctx, blosc_compress_ctx) as exported by the c-blosc that
 * numcodecs ships, looked up by cuzarr.codecs.blosc_batch. Plain C99, no Python headers: it is
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
int cz_abi_version(void) { return 2; }

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

/* Copy n byte runs: lengths[i] bytes from src + src_offsets[i] to dest + dest_offsets[i]. */
void cz_gather(int64_t n, const uint8_t *src, const int64_t *src_offsets,
               const int64_t *lengths, uint8_t *dest, const int64_t *dest_offsets)
{
    for (int64_t i = 0; i < n; i++) {
        memcpy(dest + dest_offsets[i], src + src_offsets[i], (size_t)lengths[i]);
    }
}
