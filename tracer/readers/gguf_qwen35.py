"""Qwen3.5 GGUF files (architecture `qwen35`: convert_hf_to_gguf.py's Qwen3_5TextModel, Qwen3NextModel's
tensors and keys) → what the Qwen3.5 folder reader reads (`tracer.readers.qwen3_5`): its config.json keys,
transformers' tensor names, and every tensor as the folder stores it, so that the file gives the folder's
numbers. llama.cpp's loader (src/models/qwen35.cpp) decides the same things from the same keys:

    qwen35.ssm.conv_kernel → linear_conv_kernel_dim      ssm.state_size → linear_key_head_dim (d_k)
    ssm.group_count → linear_num_key_heads (n_k)         ssm.time_step_rank → linear_num_value_heads (n_v)
    ssm.inner_size / ssm.time_step_rank → linear_value_head_dim (d_v; llama.cpp's loader also sizes the
        state by ssm.state_size, so its files have d_v = d_k)
    attention.recurrent_layers (true: a linear layer), else full_attention_interval (layer l is linear when
        (l + 1) % interval ≠ 0; 4 when absent)
    rope.dimension_count / attention.key_length → partial_rotary_factor (rope.dimension_sections, the
        multimodal sections, turn a text position as plain RoPE does: every section sees the same position)
    nextn_predict_layers → the multi-token-prediction blocks after the trunk (blk.{n}…): not read, as
        llama.cpp's main pass does not run them

Tensors, llama.cpp's name → transformers' (after `model.layers.{l}.`):

    attn_qkv → linear_attn.in_proj_qkv      attn_gate → linear_attn.in_proj_z     ssm_out → linear_attn.out_proj
    ssm_beta → linear_attn.in_proj_b        ssm_alpha → linear_attn.in_proj_a     ssm_norm → linear_attn.norm
    ssm_conv1d [channel, kernel] → linear_attn.conv1d [channel, 1, kernel]       ssm_dt.bias → linear_attn.dt_bias
    ssm_a → linear_attn.A_log               post_attention_norm → post_attention_layernorm
    attn_q [head · (query | gate) · d_head], attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm: the full layers'

What the converter stores transformed is put back as each tensor is expanded (whole or layer by layer):
  - the value heads: the folder groups them by key head ([k0v0, k0v1, k1v0, k1v1]: value head h reads key head
    h // (n_v / n_k)); the file tiles them ([k0v0, k1v0, k0v1, k1v1]: llama.cpp repeats the key heads) — in
    attn_qkv's value rows, attn_gate, ssm_beta, ssm_alpha, ssm_a, ssm_dt, ssm_conv1d's value channels, and
    ssm_out's columns. Each is put back in grouped order.
  - ssm_a is −exp(A_log): A_log = ln(−ssm_a); a value ≥ 0 (no decay to take a logarithm of) is refused.
  - the (1 + w) norms (attn_norm, post_attention_norm, attn_q_norm, attn_k_norm, output_norm) are stored
    as 1 + w: the 1 is taken off (tracer's norm adds it); ssm_norm, the gated norm, is stored as it is.
(llama.cpp L2-normalizes q and k by max(‖x‖, ε), transformers by √(‖x‖² + 10⁻⁶): the same in float32 for
any q, k of norm well above 10⁻³.) Core module: numpy and the standard library.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.config import Config
from ..errors import TracerError
from .gguf_meta import at_least, flags, meta_value
from .llama import check_layer_count

LINEAR = "linear_attn."
LAYER = {"attn_qkv.weight": LINEAR + "in_proj_qkv.weight", "attn_gate.weight": LINEAR + "in_proj_z.weight",
         "ssm_beta.weight": LINEAR + "in_proj_b.weight", "ssm_alpha.weight": LINEAR + "in_proj_a.weight",
         "ssm_conv1d.weight": LINEAR + "conv1d.weight", "ssm_a": LINEAR + "A_log", "ssm_dt.bias": LINEAR + "dt_bias",
         "ssm_norm.weight": LINEAR + "norm.weight", "ssm_out.weight": LINEAR + "out_proj.weight",
         "post_attention_norm.weight": "post_attention_layernorm.weight"}
PARTIAL_ROTARY = True  # rope.dimension_count may be less than a head (config_json checks it)
SSM_KEYS = ("ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size")
NORMS = ("layernorm.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight", "model.norm.weight")


def config_json(meta: dict, tensors: dict, raw: dict, where: Path) -> dict:
    """The qwen35 keys as config.json's for Qwen3.5 (`raw`: the Llama block's, already read)."""
    a = "qwen35."
    whole = lambda key, least=1, default=None, why="": at_least(meta, a + key, where, least, default, why)  # noqa: E731
    n_all = raw["num_hidden_layers"]
    check_layer_count(n_all, where, f"metadata '{a}block_count'")  # before a list of layers is made
    nextn = whole("nextn_predict_layers", 0, 0)
    if nextn >= n_all:
        raise TracerError(f"{where}: metadata '{a}nextn_predict_layers' {nextn} leaves no layers of the "
                          f"{n_all} ('{a}block_count') for the model itself")
    n = n_all - nextn
    kernel = whole("ssm.conv_kernel", why=" (the convolution's taps)")
    d_k, n_k = whole("ssm.state_size"), whole("ssm.group_count")
    n_v, inner = whole("ssm.time_step_rank"), whole("ssm.inner_size")
    if n_v % n_k:
        raise TracerError(f"{where}: metadata '{a}ssm.time_step_rank' {n_v} (value heads) is not a multiple of "
                          f"'{a}ssm.group_count' {n_k} (key heads): each key head serves the same number of value heads")
    if inner % n_v:
        raise TracerError(f"{where}: metadata '{a}ssm.inner_size' {inner} is not '{a}ssm.time_step_rank' {n_v} "
                          f"value heads of one size")
    recurrent = flags(meta, a + "attention.recurrent_layers", n_all, where)
    if recurrent is None:
        every = whole("full_attention_interval", 1, 4, " (every how many layers one is full attention)")
        recurrent = [(l + 1) % every != 0 for l in range(n)]
    d_head = raw.get("head_dim") or raw["hidden_size"] // max(raw["num_attention_heads"], 1)
    rotary = meta_value(meta, a + "rope.dimension_count", where, int, d_head)
    if not (0 < rotary <= d_head and rotary % 2 == 0):
        raise TracerError(f"{where}: metadata '{a}rope.dimension_count' {rotary} must be an even number of a head's "
                          f"{d_head} dimensions (the rotated pairs)")
    return {**raw, "model_type": "qwen3_5_text", "num_hidden_layers": n, "_all_layers": n_all, "head_dim": d_head,
            "layer_types": ["linear_attention" if r else "full_attention" for r in recurrent[:n]],
            "linear_conv_kernel_dim": kernel, "linear_key_head_dim": d_k, "linear_num_key_heads": n_k,
            "linear_num_value_heads": n_v, "linear_value_head_dim": inner // n_v,
            "rope_parameters": {"rope_type": "default", "rope_theta": raw["rope_theta"],
                                "partial_rotary_factor": rotary / d_head}}


def ignored(raw: dict, name: str) -> bool:
    """Whether tensor `name` belongs to a multi-token-prediction block (a layer after the trunk)."""
    layer = name.split(".")[1] if name.startswith("blk.") else ""
    return layer.isdigit() and raw["num_hidden_layers"] <= int(layer) < raw.get("_all_layers", 0)


def shape_keys(meta: dict, name: str, missing: bool = False) -> str:
    """The keys behind a layer's tensor, with their values, for a tensor whose shape does not match (a linear
    layer's sizes) or that is `missing` (which kind each layer is)."""
    linear = name.split(".", 2)[-1].startswith(("ssm_", "attn_qkv", "attn_gate"))
    said = []
    if missing and name.startswith("blk."):
        key = "qwen35.attention.recurrent_layers"
        said.append(f"each layer's kind as {key} gives it" if key in meta else
                    f"each layer's kind by qwen35.full_attention_interval {meta.get('qwen35.full_attention_interval', 4)}")
    if linear and not missing:
        said.append("sizes from " + ", ".join(f"qwen35.{k} {meta.get('qwen35.' + k)}" for k in SSM_KEYS))
    return f" ({'; '.join(said)})" if said else ""


class Family:
    """The Qwen3.5 folder reader (`fam`), with the convolution's weight as the file stores it, [channel, kernel]."""

    def __init__(self, fam):
        self.fam = fam

    def __getattr__(self, name):  # config_of, translate, file_names: the folder reader's own
        return getattr(self.fam, name)

    def hf_shapes(self, cfg: Config, raw: dict, where: Path) -> dict:
        shapes = self.fam.hf_shapes(cfg, raw, where)
        return {k: (v[0], v[2]) if k.endswith(LINEAR + "conv1d.weight") else v for k, v in shapes.items()}


def grouped(a: np.ndarray, axis: int, n_k: int, per_k: int, size: int) -> np.ndarray:
    """llama.cpp's tiled value heads along `axis` ([k0v0, k1v0, k0v1, k1v1], each `size` wide) in the folder's
    grouped order ([k0v0, k0v1, k1v0, k1v1]): the file's head j·n_k + i is the folder's i·per_k + j."""
    shape = list(a.shape)
    b = a.reshape(shape[:axis] + [per_k, n_k, size] + shape[axis + 1:])
    return np.ascontiguousarray(np.swapaxes(b, axis, axis + 1).reshape(shape))


def fix(cfg: Config, g: str, hf: str, where=None):
    """What is done to tensor `g` (transformers' `hf`) as it is expanded, or None (see the module docstring)."""
    if hf.endswith(NORMS):
        return lambda a: a - np.float32(1)
    if LINEAR not in hf:
        return None
    n_k, per, d_k, d_v = cfg.linear_k_heads, cfg.linear_v_heads // cfg.linear_k_heads, cfg.linear_d_k, cfg.linear_d_v
    qk = 2 * n_k * d_k  # q's and k's channels, then v's
    part = hf.split(LINEAR, 1)[1]
    if part in ("in_proj_qkv.weight", "conv1d.weight"):
        def channels(a: np.ndarray) -> np.ndarray:  # [channel, d_model | kernel]
            out = np.concatenate([a[:qk], grouped(a[qk:], 0, n_k, per, d_v)])
            return out[:, None, :] if part == "conv1d.weight" else out  # the folder's [channel, 1, kernel]
        return channels
    if part == "in_proj_z.weight":
        return lambda a: grouped(a, 0, n_k, per, d_v)
    if part == "out_proj.weight":
        return lambda a: grouped(a, 1, n_k, per, d_v)
    if part in ("in_proj_a.weight", "in_proj_b.weight", "dt_bias"):
        return lambda a: grouped(a, 0, n_k, per, 1)
    if part == "A_log":
        def a_log(a: np.ndarray) -> np.ndarray:  # −exp(A_log) → A_log
            if not (a < 0).all():
                i = int(np.argmin(a < 0))
                raise TracerError(f"{where}: tensor {g!r} holds {float(a[i]):g} at [{i}]; llama.cpp stores −exp(A_log), "
                                  f"a number < 0 (the decay rate of each value head)")
            return np.log(-grouped(a, 0, n_k, per, 1))
        return a_log
    return None
