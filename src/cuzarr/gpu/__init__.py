"""The GPU backend, in two layers.

Host-side preparation that needs no GPU and is tested on the CPU:

- :mod:`cuzarr.gpu.blosc_frames`: Blosc 1 frames parsed into stream and block descriptors;
- :mod:`cuzarr.gpu.streams`: header/trailer handling of zlib, gzip, numcodecs LZ4 and zstd
  chunks around the raw streams nvCOMP decodes and encodes;
- :mod:`cuzarr.gpu.plan`: codec-chain classification, wave sizing, packed batches, scatter
  descriptors, and NumPy references of every GPU kernel;
- :mod:`cuzarr.gpu.kernels`: CUDA sources of the kernels (strings; compiled by CuPy on use).

Everything that calls CUDA lives in :mod:`cuzarr.gpu.device` (nvCOMP, kernels, uploads) and
:mod:`cuzarr.gpu.files` (kvikio reads of local files into device memory, the I/O report);
:mod:`cuzarr.gpu.backend` is the backend of the engine's loops
(:class:`~cuzarr.gpu.backend.GpuBackend`) over them. No module of this package is imported by
``import cuzarr``; none but ``device``, ``files`` and ``backend`` imports a GPU package.
"""
