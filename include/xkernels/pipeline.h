// cp.async (sm_80+): 16-byte global -> shared copies that bypass registers, in commit groups, and
// the ring of shared-memory stages that a loop streams tiles through.
//
// A stage ring of kStages slots: the loop that consumes tile j first waits until at most
// kStages - 2 groups are in flight (tile j has landed), syncs the block (every thread's copies are
// visible, and every warp is done with tile j - 1), then issues tile j + kStages - 1 into the slot
// tile j - 1 used, and commits one group per tile, also when there is nothing left to load, so
// that the group count stays uniform.
#ifndef XKERNELS_PIPELINE_H_
#define XKERNELS_PIPELINE_H_

#include <cstdint>

#include "xkernels/common.h"

namespace xkernels::pipeline {

// 16 bytes from global `src` to shared `dst` (a shared-window address); when `valid` is false the
// destination is zero-filled and nothing is read (src may then be any pointer). L2 only (.cg): the
// tiles are read once per block.
XK_DEVICE void cp_async_16(uint32_t dst, const void* src, bool valid = true) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

XK_DEVICE void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until at most `kPending` committed groups of this thread are still in flight.
template <int kPending>
XK_DEVICE void wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// The slot of tile j in a ring of kStages.
template <int kStages>
XK_DEVICE int slot(int j) {
  return j % kStages;
}

}  // namespace xkernels::pipeline

#endif  // XKERNELS_PIPELINE_H_
