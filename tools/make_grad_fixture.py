"""Build `tests/data/gpt2-tiny/grads.npz`: PyTorch autograd's gradients for the gpt2-tiny fixture.

The reference for checking a NumPy backward pass. Run it with the separate torch venv (never a
dependency of tracer or its tests):

    python3 -m venv /work/torchvenv
    /work/torchvenv/bin/pip install torch==2.13.0 transformers==5.24.0 safetensors numpy
    /work/torchvenv/bin/python tools/make_grad_fixture.py

It loads the existing random GPT-2 in `tests/data/gpt2-tiny/transformers/` (3 layers, 4 heads,
n_embd 16, the full 50,257-token vocabulary; see that folder's README and
`tools/make_gpt2_fixture.py`) with `attn_implementation="eager"`, float32, `model.eval()` (dropout
off), `torch.manual_seed(0)`, and for each of two fixed token sequences computes
`out = model(input_ids=ids[None], labels=ids[None])`, i.e. the mean next-token cross-entropy of
positions 0..n-2 predicting tokens 1..n-1, and `out.loss.backward()`. Gradients are zeroed between
the two cases.

What `grads.npz` holds (a plain zip of `.npy` files, no pickled objects; `np.load(path)` reads it):

| key                    | dtype / shape            | what                                                    |
|------------------------|--------------------------|---------------------------------------------------------|
| `ids`                  | int64 [19]               | the article's sentence "You are a business consultant, please analyze the impact of rising oil prices on the automotive industry." in gpt2 ids |
| `loss`                 | float64 []               | `out.loss` (computed in float32, stored widened)        |
| `logits`               | float32 [19, 50257]      | `out.logits[0]`                                         |
| `grad.<name>`          | float32, the param shape | d loss / d parameter, one per `model.named_parameters()` name (`grad.transformer.wte.weight`, `grad.transformer.h.0.attn.c_attn.weight`, ...). The tied `lm_head.weight` is `transformer.wte.weight` and appears once, as that: its gradient is the sum of the embedding's and the unembedding's parts. GPT-2's Conv1D weights are [in, out] as transformers stores them. |
| `case2.ids`, `case2.loss`, `case2.logits` [7, 50257], `case2.grad.<name>` | as above | the same for the shorter input "The cat sat on the mat." = [464, 3797, 3332, 319, 262, 2603, 13] |

The file is written byte-for-byte reproducibly: `np.savez` stamps zip entries with the current
time, so this script writes the zip itself (sorted keys, ZIP_STORED, entry date 1980-01-01, each
entry from `np.lib.format.write_array`), and runs torch on one thread with deterministic
algorithms. Built with torch 2.13.0+cpu, transformers 5.24.0, safetensors 0.8.0, numpy 2.4.6.
When run it prints both losses and the largest |gradient| of every parameter.
"""

from __future__ import annotations

import io
import sys
import zipfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import GPT2LMHeadModel

SEED = 0
# "You are a business consultant, please analyze the impact of rising oil prices on the automotive
# industry." as the gpt2 tokenizer encodes it (the same prompt as reference.npz).
CASE1_IDS = [1639, 389, 257, 1597, 17028, 11, 3387, 16602, 262, 2928, 286, 7396, 3056, 4536, 319, 262, 29393, 2831, 13]
# A second, shorter input: "The cat sat on the mat."
CASE2_IDS = [464, 3797, 3332, 319, 262, 2603, 13]
DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "gpt2-tiny"
OUT = DATA / "grads.npz"
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """An .npz that np.load reads, with the same bytes every time: sorted, stored, fixed dates."""
    tmp = path.with_suffix(".npz.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key in sorted(arrays):
            arr = np.asarray(arrays[key])
            if not arr.flags.c_contiguous:  # (np.ascontiguousarray would turn a 0-d array 1-d)
                arr = arr.copy(order="C")
            buf = io.BytesIO()
            np.lib.format.write_array(buf, arr, allow_pickle=False)
            info = zipfile.ZipInfo(key + ".npy", date_time=ZIP_DATE)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())
    tmp.replace(path)


def run_case(model: GPT2LMHeadModel, ids_list: list[int], prefix: str) -> dict[str, np.ndarray]:
    model.zero_grad(set_to_none=True)
    ids = torch.tensor(ids_list, dtype=torch.long)
    out = model(input_ids=ids[None], labels=ids[None])
    loss = out.loss
    # The loss is what a hand-written backward starts from: make sure it is the plain mean
    # next-token cross-entropy over positions 0..n-2.
    manual = F.cross_entropy(out.logits[0, :-1].double(), ids[1:])
    assert abs(manual.item() - loss.item()) < 1e-5, (manual.item(), loss.item())
    loss.backward()

    arrays = {
        f"{prefix}ids": np.array(ids_list, dtype=np.int64),
        f"{prefix}loss": np.array(loss.item(), dtype=np.float64),
        f"{prefix}logits": out.logits[0].detach().numpy().astype(np.float32),
    }
    print(f"[{prefix or 'case1.'}] n={len(ids_list)} loss={loss.item():.9g}")
    for name, p in model.named_parameters():  # tied lm_head.weight is deduplicated here
        assert p.grad is not None, f"no gradient for {name}"
        g = p.grad.detach().numpy().astype(np.float32)
        assert g.shape == tuple(p.shape) and np.isfinite(g).all(), name
        arrays[f"{prefix}grad.{name}"] = g
        print(f"    max|grad| {np.abs(g).max():.6e}  {name} {list(g.shape)}")
    return arrays


def main() -> int:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel.from_pretrained(DATA / "transformers", attn_implementation="eager",
                                            dtype=torch.float32)
    model.eval()  # dropout off
    names = [n for n, _ in model.named_parameters()]
    assert "transformer.wte.weight" in names and "lm_head.weight" not in names, names
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(), "lm_head is not tied"
    assert all(p.dtype == torch.float32 for p in model.parameters())

    arrays = run_case(model, CASE1_IDS, "")
    arrays.update(run_case(model, CASE2_IDS, "case2."))

    # The forward pass agrees with the existing fixture's logits.
    ref = np.load(DATA / "reference.npz", allow_pickle=False)
    assert np.array_equal(ref["input_ids"], arrays["ids"])
    diff = float(np.abs(ref["logits"] - arrays["logits"]).max())
    print(f"max |logits - reference.npz logits| = {diff:.3e}")
    assert diff < 1e-4, diff

    write_npz(OUT, arrays)
    back = np.load(OUT, allow_pickle=False)
    assert sorted(back.files) == sorted(arrays)
    assert all(back[k].dtype == arrays[k].dtype and back[k].shape == arrays[k].shape
               and np.array_equal(back[k], arrays[k]) for k in arrays)

    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}")
    print(f"{OUT.stat().st_size:,} bytes  {OUT.relative_to(DATA.parent.parent.parent)}  ({len(arrays)} arrays)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
