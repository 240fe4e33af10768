"""CUDA sources of cuzarr's GPU kernels (plain strings; CuPy compiles them with NVRTC on use).

Every kernel runs one thread per output byte (or element) with a grid-stride loop and computes
exactly the index formula of its NumPy reference in :mod:`cuzarr.gpu.plan`:

============================  =======================================
kernel                        reference
============================  =======================================
``cuzarr_byte_unshuffle``     :func:`~cuzarr.gpu.plan.byte_unshuffle_indices`
``cuzarr_bit_unshuffle``      :func:`~cuzarr.gpu.plan.bit_unshuffle_indices`
``cuzarr_byteswap``           :func:`~cuzarr.gpu.plan.byteswap_indices`
``cuzarr_scatter``            :func:`~cuzarr.gpu.plan.scatter_indices`
``cuzarr_crc``                :mod:`cuzarr.gpu.crc` (one thread per segment)
``cuzarr_zstd_walk``          :func:`~cuzarr.gpu.zstd_frames.walk` (one thread per frame)
============================  =======================================

The batched unshuffle kernels take a table of blocks (one row per Blosc block of every frame
of a wave: source offset, destination offset, size, typesize) and a prefix sum of block sizes,
so one launch unshuffles a whole wave. ``cuzarr_crc`` computes the CRC-32C (or CRC-32) of a
table of byte ranges in one launch (:mod:`cuzarr.gpu.crc` explains the arithmetic). The CPU
test suite compiles these sources with the host C++ compiler (kernel qualifiers stubbed out)
to catch syntax errors before a GPU run, and runs ``cuzarr_crc`` there, thread by thread,
against the ``crc32c`` package and :func:`zlib.crc32`.

The first five ran on an H200 (2026-12-04) and matched their references there;
``cuzarr_zstd_walk`` has not run on a GPU yet (its C source runs as host C++ in
tests/test_zstd_frames.py).
"""

from __future__ import annotations

__all__ = ["BLOCK_TABLE_FIELDS", "CRC_TABLE_FIELDS", "KERNEL_NAMES", "SOURCE"]

#: Columns of the int64 block table the unshuffle kernels read (row-major, one row per block).
BLOCK_TABLE_FIELDS = ("src", "dst", "nbytes", "typesize")

KERNEL_NAMES = (
    "cuzarr_byte_unshuffle",
    "cuzarr_bit_unshuffle",
    "cuzarr_byteswap",
    "cuzarr_scatter",
    "cuzarr_crc",
    "cuzarr_zstd_walk",
)

#: Columns of the int64 range table ``cuzarr_crc`` reads (one row per range).
CRC_TABLE_FIELDS = ("offset", "nbytes", "register")

SOURCE = r"""
typedef long long i64;
typedef unsigned char u8;
typedef unsigned int u32;

// Block b owning global byte i: binary search in the exclusive prefix sum of block sizes.
__device__ __forceinline__ i64 cuzarr_find_block(const i64* starts, i64 nblocks, i64 i) {
    i64 lo = 0, hi = nblocks - 1;
    while (lo < hi) {
        i64 mid = (lo + hi + 1) / 2;
        if (starts[mid] <= i) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// Undo Blosc's byte shuffle for a table of blocks; one thread per output byte.
// Output byte o < n*ts (n whole elements) comes from (o % ts) * n + o / ts; the rest in place.
extern "C" __global__ void cuzarr_byte_unshuffle(
        const u8* src, u8* dst, const i64* table, const i64* starts, i64 nblocks, i64 total) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (i64)blockDim.x * gridDim.x) {
        i64 b = cuzarr_find_block(starts, nblocks, i);
        const i64* row = table + 4 * b;
        i64 o = i - starts[b];
        i64 nbytes = row[2], ts = row[3];
        i64 n = nbytes / ts;
        i64 s = (o < n * ts) ? (o % ts) * n + o / ts : o;
        dst[row[1] + o] = src[row[0] + s];
    }
}

// Undo Blosc 1's bit shuffle; one thread per output byte. n8 = n when n % 8 == 0, else 0
// (c-blosc 1.x leaves such blocks unshuffled). Output byte o = e*ts + b gathers bit k from
// source byte (8*b + k) * (n8/8) + e/8, at bit position e % 8.
extern "C" __global__ void cuzarr_bit_unshuffle(
        const u8* src, u8* dst, const i64* table, const i64* starts, i64 nblocks, i64 total) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (i64)blockDim.x * gridDim.x) {
        i64 b = cuzarr_find_block(starts, nblocks, i);
        const i64* row = table + 4 * b;
        i64 o = i - starts[b];
        i64 nbytes = row[2], ts = row[3];
        i64 n = nbytes / ts;
        i64 n8 = (n % 8 == 0) ? n : 0;
        const u8* s = src + row[0];
        if (o < n8 * ts) {
            i64 e = o / ts, byte = o % ts, row_bytes = n8 / 8;
            unsigned int v = 0;
            for (int k = 0; k < 8; ++k) {
                v |= ((s[(8 * byte + k) * row_bytes + e / 8] >> (e % 8)) & 1u) << k;
            }
            dst[row[1] + o] = (u8)v;
        } else {
            dst[row[1] + o] = s[o];
        }
    }
}

// Reverse the bytes of each itemsize-byte element: out[o] = in[(o/s)*s + (s-1-o%s)].
extern "C" __global__ void cuzarr_byteswap(const u8* src, u8* dst, i64 nbytes, i64 itemsize) {
    for (i64 o = (i64)blockIdx.x * blockDim.x + threadIdx.x; o < nbytes;
         o += (i64)blockDim.x * gridDim.x) {
        dst[o] = src[(o / itemsize) * itemsize + (itemsize - 1 - o % itemsize)];
    }
}

// Copy boxes (one table row each) from decoded chunks to the output, one thread per element.
// Row layout (int64): src_base, dst_base, n, shape[8], src_strides[8], dst_strides[8];
// starts: exclusive prefix sum of n. Element i of a box is unravelled over shape (last axis
// fastest) and dotted with each side's element strides; bytes are copied itemsize at a time.
extern "C" __global__ void cuzarr_scatter(
        const u8* src, u8* dst, const i64* table, const i64* starts, i64 nrows, i64 total,
        i64 itemsize) {
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (i64)blockDim.x * gridDim.x) {
        i64 r = cuzarr_find_block(starts, nrows, t);
        const i64* row = table + 27 * r;
        i64 rem = t - starts[r];
        i64 s = row[0], d = row[1];
        for (int ax = 7; ax >= 0; --ax) {
            i64 extent = row[3 + ax];
            i64 c = rem % extent;
            rem /= extent;
            s += c * row[11 + ax];
            d += c * row[19 + ax];
        }
        for (i64 k = 0; k < itemsize; ++k) {
            dst[d * itemsize + k] = src[s * itemsize + k];
        }
    }
}

// a * b modulo the polynomial, in reflected bit order (bit 31 is x^0).
__device__ __forceinline__ u32 cuzarr_gf2_mul(u32 a, u32 b, u32 poly) {
    u32 p = 0;
    for (int i = 0; i < 32; ++i) {
        if (a & (0x80000000u >> i)) p ^= b;
        b = (b & 1u) ? ((b >> 1) ^ poly) : (b >> 1);
    }
    return p;
}

// The register after n zero bytes: crc * x^(8n); x2n[k] = x^(2^k) mod the polynomial.
__device__ __forceinline__ u32 cuzarr_crc_shift(u32 crc, i64 n, const u32* x2n, u32 poly) {
    u32 p = 0x80000000u;
    int k = 3;
    for (i64 m = n; m > 0; m >>= 1, ++k) {
        if (m & 1) p = cuzarr_gf2_mul(x2n[k], p, poly);
    }
    return cuzarr_gf2_mul(p, crc, poly);
}

// CRCs of a table of byte ranges (row: offset, nbytes, initial register), one thread per
// segment of seg bytes (starts: exclusive prefix sum of each row's segments, at least one).
// A thread runs the byte table over its segment, from the row's register for the first
// segment and from 0 for the others, shifts the result past the row's bytes after the
// segment, and XORs it into out[row] (zeroed by the caller); the first segment's thread
// also applies the final XOR. CRCs are linear, so out[row] is the CRC of the whole range.
extern "C" __global__ void cuzarr_crc(
        const u8* src, u32* out, const i64* table, const i64* starts, const u32* bytes_table,
        const u32* x2n, i64 nrows, i64 total, i64 seg, u32 poly) {
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (i64)blockDim.x * gridDim.x) {
        i64 r = cuzarr_find_block(starts, nrows, t);
        const i64* row = table + 3 * r;
        i64 k = t - starts[r];
        i64 off = k * seg;
        i64 n = row[1] - off;
        if (n > seg) n = seg;
        if (n < 0) n = 0;
        u32 c = (k == 0) ? (u32)row[2] : 0u;
        const u8* p = src + row[0] + off;
        for (i64 j = 0; j < n; ++j) {
            c = bytes_table[(c ^ p[j]) & 0xFFu] ^ (c >> 8);
        }
        c = cuzarr_crc_shift(c, row[1] - off - n, x2n, poly);
        if (k == 0) c ^= 0xFFFFFFFFu;
        atomicXor(out + r, c);
    }
}

// Walk the block headers of zstd frames (RFC 8878 3.1.1.2), one thread per frame. Row r of
// table: first block header, end of the frame, 1 if a 4-byte checksum ends it. out[r]: 0 the
// blocks end exactly at the end (before the checksum); 1 they do not (truncated, overlong, a
// reserved block type, a block over 128 KiB); 2 bytes follow the last block. Each step
// advances at least 3 bytes, so every walk ends.
extern "C" __global__ void cuzarr_zstd_walk(
        const u8* src, const i64* table, i64* out, i64 nrows) {
    for (i64 r = (i64)blockIdx.x * blockDim.x + threadIdx.x; r < nrows;
         r += (i64)blockDim.x * gridDim.x) {
        i64 pos = table[3 * r];
        i64 end = table[3 * r + 1];
        i64 tail = table[3 * r + 2] ? 4 : 0;
        i64 verdict = 1;
        while (pos + 3 <= end) {
            u32 h = (u32)src[pos] | ((u32)src[pos + 1] << 8) | ((u32)src[pos + 2] << 16);
            u32 kind = (h >> 1) & 3u;
            u32 size = h >> 3;
            if (kind == 3u || size > 131072u) break;
            pos += 3 + (kind == 1u ? 1 : (i64)size);
            if (h & 1u) {
                if (pos + tail == end) verdict = 0;
                else if (pos + tail < end) verdict = 2;
                break;
            }
        }
        out[r] = verdict;
    }
}
"""
