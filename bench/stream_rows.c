/*
 * The copy of one chunk into rows of a larger array, three ways: memcpy per row, streaming
 * stores every 16 bytes (cz_stream_run before ABI 19, kept here) and the batch helper's own
 * cz_stream_run (since ABI 19: whole cache lines streamed, the partial lines at either end
 * by memcpy), compiled in from src/cuzarr/_native/czbatch.c.
 *
 * A chunk of 64 planes x 64 rows of ROW bytes is copied into a 256 MiB array (rows 1 KiB
 * apart, planes 512 KiB apart, as a 64^3 uint16 chunk of a 512^3 array when ROW is 128), the
 * destination starting 0, 16, 32 or 48 bytes past a cache line (NumPy's large arrays start 16
 * past one). Every chunk position of the array is written in turn, so the destination is not
 * in the cache; the source (on a cache line) is. Best of 5 passes, microseconds a chunk.
 *
 *     cc -O2 -pthread -o /tmp/stream_rows bench/stream_rows.c && /tmp/stream_rows 128
 */
#define _GNU_SOURCE
#include <emmintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "../src/cuzarr/_native/czbatch.c"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* cz_stream_run before ABI 19, kept for the comparison: streaming from 16-byte alignment, so
 * the partial cache lines at either end of a row are streamed too. */
static void stream_every_16(uint8_t *d, const uint8_t *s, size_t n)
{
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
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
    for (; n >= 16; n -= 16, d += 16, s += 16) {
        _mm_stream_si128((__m128i *)d, _mm_loadu_si128((const __m128i *)s));
    }
    memcpy(d, s, n);
}

int main(int argc, char **argv)
{
    const size_t row = argc > 1 ? (size_t)atoi(argv[1]) : 128;
    if (row < 1 || row > 1024) {
        fprintf(stderr, "ROW: 1 to 1024 bytes\n");
        return 2;
    }
    const size_t big = (size_t)512 * 512 * 512 * 2, rs = 1024, ps = 512 * 1024;
    uint8_t *base = mmap(NULL, big + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        return 1;
    }
    memset(base, 1, big + 4096);
    uint8_t *src = aligned_alloc(64, 64 * 64 * row);
    for (size_t i = 0; i < 64 * 64 * row; i++) {
        src[i] = (uint8_t)(i * 7);
    }
    const char *names[] = {"memcpy", "stream every 16 B", "stream whole lines"};
    printf("rows of %zu bytes, us a chunk of %zu KiB\n", row, 64 * 64 * row / 1024);
    for (size_t off = 0; off < 64; off += 16) {
        for (int v = 0; v < 3; v++) {
            double best = 1e9;
            for (int pass = 0; pass < 5; pass++) {
                double t0 = now();
                int chunks = 0;
                for (size_t cz = 0; cz < 8; cz++) {
                    for (size_t cy = 0; cy < 8; cy++) {
                        for (size_t cx = 0; cx < 1024 / row && cx < 8; cx++, chunks++) {
                            uint8_t *d0 = base + off + cz * 64 * ps + cy * 64 * rs + cx * row;
                            const uint8_t *s = src;
                            for (size_t z = 0; z < 64; z++) {
                                for (size_t y = 0; y < 64; y++, s += row) {
                                    uint8_t *d = d0 + z * ps + y * rs;
                                    if (v == 0) {
                                        memcpy(d, s, row);
                                    } else if (v == 1) {
                                        stream_every_16(d, s, row);
                                    } else {
                                        cz_stream_run(d, s, row);
                                    }
                                }
                            }
                            _mm_sfence();
                        }
                    }
                }
                double t = (now() - t0) / chunks;
                best = t < best ? t : best;
            }
            printf("offset %2zu  %-19s %7.1f\n", off, names[v], best * 1e6);
        }
    }
    return 0;
}
