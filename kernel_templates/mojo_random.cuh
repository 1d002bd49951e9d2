// mojo_random.cuh: counter-based random numbers (Philox 4x32-10, Salmon et
// al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), so a
// request's draws depend on its seed and offset alone, never on the batch
// it shares or on the order threads run.
//
// The ops' convention: a request has a 64-bit seed (the key) and a 64-bit
// offset (counter words 0-1); one op call draws from the counter (offset,
// `stream`, 0) with stream 0, 1, ... for its draws, then advances the offset
// by one, so the next call (or a CUDA graph's next replay) draws fresh
// numbers. src/reference/sampling.cpp has the same generator on the host.
#pragma once

#include "mojo_prelude.cuh"

namespace mojo {

struct Philox4x32 {
  unsigned v[4];
};

__device__ __forceinline__ Philox4x32 philox4x32_10(Philox4x32 c, unsigned k0, unsigned k1) {
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const unsigned long long p0 = 0xD2511F53ull * c.v[0], p1 = 0xCD9E8D57ull * c.v[2];
    c = Philox4x32{{unsigned(p1 >> 32) ^ c.v[1] ^ k0, unsigned(p1), unsigned(p0 >> 32) ^ c.v[3] ^ k1, unsigned(p0)}};
    k0 += 0x9E3779B9u;  // the Weyl sequence that bumps the key between rounds
    k1 += 0xBB67AE85u;
  }
  return c;
}

// 24 uniform random bits (a uniform in [0, 1) is r * 2^-24) of a request's draw `stream`.
__device__ __forceinline__ unsigned random24(long long seed, long long offset, unsigned stream) {
  const unsigned long long s = (unsigned long long)seed, o = (unsigned long long)offset;
  const Philox4x32 r = philox4x32_10(Philox4x32{{unsigned(o), unsigned(o >> 32), stream, 0u}}, unsigned(s),
                                     unsigned(s >> 32));
  return r.v[0] >> 8;
}

}  // namespace mojo
