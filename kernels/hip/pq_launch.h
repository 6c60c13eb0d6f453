// Host side of the C ABI: stream type and error reporting, HIP or CUDA runtime.
#pragma once
#define PQ_EINVAL (-22)  // bad arguments (checked before launching)
#if defined(PQ_HIP)
typedef hipStream_t pq_stream;
static inline int pq_last_error() { return (int)hipGetLastError(); }
#else
typedef cudaStream_t pq_stream;
static inline int pq_last_error() { return (int)cudaGetLastError(); }
#endif
