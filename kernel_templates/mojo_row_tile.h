// mojo_row_tile.h: what the row kernels (mojo::RowTile in mojo_prelude.cuh: the norms, softmax) and their ops
// (src/ops/) agree on. Macros: NVRTC compiles no host function, and the host has no __device__.
#pragma once

// The vectors of its row a thread keeps in registers at most: 16-byte packs of 4 registers, `packs` an item
// (softmax_backward's items are two), within 64 registers, or 24 in a block of more than 512 threads, where
// ptxas gives a thread 64 in all (holding 64 there spilled 80 to 720 bytes of stack in softmax and the norms at
// 32,768 to 131,072 columns, and softmax_backward's 32 made LLVM spill 16; 2026-11-28). A longer row is read
// twice (softmax keeps the start of it in shared memory for the second read).
#define MOJO_ROW_REGISTER_VECTORS(block_threads, packs) (((block_threads) > 512 ? 24 : 64) / (4 * (packs)))
