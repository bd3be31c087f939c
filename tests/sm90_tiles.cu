// The sm90 attention kernel's tile arithmetic on the host (test_sm90_tiles.py builds and runs
// this with nvcc; no GPU): for query lengths around the 128- and 192-row tiles, key lengths around
// the 128- and 176-key tiles, causal or not, windows, dense and ragged, every query token and key
// is visible in the kernel exactly when params.h's rule says so. The kernel's side, as in
// sm90.h: detail::sm90_item for each tile, the key tiles j_begin .. j_end - 1, the softmax's mask
// on the tiles outside full_lo .. full_hi, and the rows it writes (row t at token q_begin + t,
// none below pad). Prints the counts; exits 1 on any mismatch.
#include <cstdio>
#include <vector>

#include "xkernels/attention/sm90.h"

using namespace xkernels::attention;

template <int kRows, int kKeys>
long Check(int q_len, int kv_len, bool causal, int window, bool ragged, long* bad) {
  Params p;
  // ragged: the request under test is the second of two (its tokens and keys start past 0)
  std::vector<int32_t> qo = {0, 37, 37 + q_len}, kv = {0, 11, 11 + kv_len};
  int b = 0;
  if (ragged) {
    p.qo_indptr = qo.data();
    p.kv_indptr = kv.data();
    p.kv_mode = KvMode::kRagged;
    p.total_q = qo[2];
    p.kv_len = kv[2];
    b = 1;
  } else {
    p.q_len = q_len;
    p.kv_len = kv_len;
    p.total_q = q_len;
  }
  p.causal = causal;
  p.window_left = window;
  const int q0 = ragged ? qo[1] : 0, tiles = (q_len + kRows - 1) / kRows;
  std::vector<int> written(q_len, 0);
  long pairs = 0;
  for (int tile = 0; tile < tiles; ++tile) {
    detail::Sm90Item w{};
    w.b = b, w.tile = tile;
    detail::sm90_item<kRows, kKeys>(p, w);
    for (int r = 0; r < kRows; ++r) {
      const int32_t t = w.t_first + r;  // the kernel's row
      if (t < w.pad) continue;          // not written
      const int token = w.q_begin + t - q0;
      if (token < 0 || token >= q_len) {
        ++*bad;
        continue;
      }
      ++written[token];
      std::vector<char> seen(kv_len, 0);
      for (int j = w.j_begin; j < w.j_end; ++j) {
        const bool masked = j * kKeys < w.full_lo || (j + 1) * kKeys > w.full_hi;
        for (int pos = j * kKeys; pos < (j + 1) * kKeys; ++pos) {
          int32_t lo = 0, hi = w.kv_len;
          if (masked && causal) hi = std::min(hi, t + w.diag + 1);
          if (masked && window >= 0) lo = t + w.diag - window;
          if (pos < lo || pos >= hi) continue;
          if (pos >= kv_len) {
            ++*bad;  // a key past the request's
          } else {
            seen[pos] = 1;
          }
        }
      }
      const int diag = kv_len - q_len;
      for (int k = 0; k < kv_len; ++k, ++pairs) {
        const bool visible =
            (!causal || k <= token + diag) && (window < 0 || k >= token + diag - window);
        if (visible != (seen[k] != 0)) ++*bad;
      }
    }
  }
  for (int n : written) {
    if (n != 1) ++*bad;  // every token written once
  }
  return pairs;
}

int main() {
  long bad = 0, pairs = 0, cases = 0;
  for (int q : {1, 7, 63, 64, 100, 127, 128, 129, 191, 192, 193, 300, 383, 384, 385, 600}) {
    for (int kv : {0, 1, 37, 127, 128, 176, 200, 384, 600, 700}) {
      for (int causal = 0; causal < 2; ++causal) {
        for (int window : {-1, 0, 5, 50, 300}) {
          for (int ragged = 0; ragged < 2; ++ragged) {
            pairs += Check<128, 128>(q, kv, causal, window, ragged, &bad);
            pairs += Check<128, 176>(q, kv, causal, window, ragged, &bad);
            pairs += Check<192, 128>(q, kv, causal, window, ragged, &bad);
            cases += 3;
          }
        }
      }
    }
  }
  std::printf("%ld cases, %ld (token, key) pairs, %ld mismatches\n", cases, pairs, bad);
  return bad != 0;
}
