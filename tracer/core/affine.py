"""x·W + b in whichever orientation runs fastest (`Affine`), and the row blocks the unembedding is
multiplied in: the products every sublayer's fast layout is made of, kept out of the equations.

A W held as rows (a torch Linear's [d_out, d_in], as Llama, Qwen2 and Mistral files store their
matrices: W is a transposed view) is multiplied as rows·xᵀ in passes of a few positions (fewer than
FEW_ROWS): OpenBLAS runs that faster than x·W there (BENCHMARKS.md). A one-position step reads `rows`
(W transposed, C-contiguous) when a layout keeps them (`transposed`). Each gives the sum written in
`tracer.core.equations`. Core module: imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FEW_ROWS = 64  # below this many positions, a W held as rows is multiplied as rows·xᵀ (from 64 on: no faster)
UNEMBED_BLOCK_BYTES = 256 * 2**20  # float32 bytes of the unembedding's rows multiplied at a time (one block up
# to a 65,536-token vocabulary at d_model 1,024: one product, as ever); the same blocks whether W_U is whole
# or streamed, so both give the same numbers; each product call costs a BLAS dispatch, hence big blocks


def row_blocks(n: int, d_in: int) -> list[tuple[int, int]]:
    """[(lo, hi)]: n rows of d_in numbers cut in blocks of UNEMBED_BLOCK_BYTES (as float32)."""
    step = max(1, UNEMBED_BLOCK_BYTES // (4 * max(d_in, 1)))
    return [(lo, min(lo + step, n)) for lo in range(0, n, step)]


def rows_times(rows_of, n: int, x: np.ndarray, dtype) -> np.ndarray:  # [pos, d_in] → [pos, n]
    """(W_T @ x.T).T for W_T [n, d_in] given block by block (`rows_of(lo, hi)` → [hi - lo, d_in]):
    the unembedding of one sequence; Fortran-ordered, as one product's transpose is."""
    blocks = row_blocks(n, x.shape[1])
    if len(blocks) == 1:
        return np.matmul(rows_of(0, n), x.T).T  # [pos, n]: the one product
    out = np.empty((n, x.shape[0]), dtype=np.result_type(dtype, x.dtype))  # [n, pos]
    for lo, hi in blocks:
        out[lo:hi] = np.matmul(rows_of(lo, hi), x.T)  # [hi - lo, pos]
    return out.T


def times_columns(x: np.ndarray, columns_of, n: int, dtype) -> np.ndarray:  # [pos, d_in] → [pos, n]
    """x @ W for W [d_in, n] given block by block (`columns_of(lo, hi)` → [d_in, hi - lo]), C order:
    the logit lens's products, in the unembedding's blocks."""
    blocks = row_blocks(n, x.shape[1])
    if len(blocks) == 1:
        return x @ columns_of(0, n)  # [pos, n]: the one product
    out = np.empty((x.shape[0], n), dtype=np.result_type(dtype, x.dtype))  # [pos, n]
    for lo, hi in blocks:
        out[:, lo:hi] = x @ columns_of(lo, hi)
    return out


@dataclass
class Affine:
    """x·W + b for W [d_in, d_out], the bias added in place (no second output-sized array)."""

    W: np.ndarray  # [d_in, d_out]
    b: np.ndarray | None  # [d_out], or None for a map without bias
    rows: np.ndarray | None = None  # W transposed, C-contiguous [d_out, d_in]: read by one-position steps
    by_rows: bool = False  # compute (W.T @ x.T).T for one sequence: the unembedding, whose W.T is W_E's rows

    def __call__(self, x: np.ndarray) -> np.ndarray:  # [pos, d_in] → [pos, d_out]
        rows = x.reshape(-1, x.shape[-1])  # [pos, d_in] (a batch's positions one after another)
        if self.by_rows and x.ndim == 2:  # (a batch, in training, wants its logits row by row: C order)
            W_T = self.W.T  # [d_out, d_in]
            out = rows_times(lambda lo, hi: W_T[lo:hi], W_T.shape[0], rows, W_T.dtype)  # [pos, d_out], Fortran-ordered
        elif rows.shape[0] == 1:  # one position (a decode step): a vector product, as [1, d_in]·W is (numpy's gemv),
            one = rows[0] @ self.W if self.rows is None else self.rows @ rows[0]  # [d_out] and the bias added to a vector
            if self.b is not None:  # (numpy broadcasts [1, d_out] + [d_out] through its slower iterator)
                one += self.b
            return one.reshape(*x.shape[:-1], one.shape[-1])
        elif 1 < rows.shape[0] < FEW_ROWS and self.W.flags.f_contiguous:  # W held as rows [d_out, d_in] (a Linear's layout)
            out = np.ascontiguousarray(np.matmul(self.W.T, rows.T).T)  # [pos, d_out], C order as below
        else:
            out = rows @ self.W  # [pos, d_out]
        if self.b is not None:
            out += self.b
        return out.reshape(*x.shape[:-1], out.shape[-1])


def transposed(W: np.ndarray, block: int = 128) -> np.ndarray:  # [d_in, d_out] → [d_out, d_in]
    """A C-contiguous copy of W.T, copied in blocks of rows that stay in cache (2× numpy's copy)."""
    out = np.empty(W.shape[::-1], dtype=W.dtype)  # [d_out, d_in]
    for i in range(0, W.shape[0], block):
        out[:, i : i + block] = W[i : i + block].T
    return out
