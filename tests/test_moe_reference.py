"""The references the mixture-of-experts decoder is checked against, checked first.

tests/reference.py's naive MoE forward (per position, head, key and expert, float64, from the checkpoint's own
tensors) gives transformers' numbers for every MoE fixture (tools/make_moe_fixtures.py): logits and residuals
within 1e-4, patterns within 1e-5, router logits within 1e-4 and the same experts chosen, in the same order,
with the same weights. Its RoPE follows transformers for folders (gpt-oss's YaRN with truncate false) and
llama.cpp for GGUF files (ggml's floored and ceiled correction range), and the two differ on gpt-oss-tiny.
The GGUF files tests/conftest.py writes (as convert_hf_to_gguf.py does: gpt-oss, qwen3moe, olmoe, llama with
expert tensors) read back with the gguf package to the folder's tensors (exactly for F32, within MXFP4's
rounding for gpt-oss's experts), in the layout llama.cpp's loader asks for; and the MXFP4 file's own reference
(the naive forward on its de-quantized weights) routes with no top-k choice near a tie.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from .reference import _yarn_range, moe_folder, moe_forward, rope_frequencies

DATA = Path(__file__).parent / "data"
MOE = ["gpt-oss-tiny", "qwen3-moe-tiny", "olmoe-tiny", "mixtral-tiny", "qwen2-moe-tiny"]
PRE = {"gpt-oss-tiny": "gpt-2", "qwen3-moe-tiny": "qwen2", "olmoe-tiny": "gpt-2", "mixtral-tiny": "llama-bpe"}  # GGUF
ROUTER_MARGIN = 5e-3  # neighbouring router logits of the top k + 1 at least this apart (the tool asks 1e-2 of the
# folders; the MXFP4 file's reference, computed from gpt-oss-tiny, keeps 5e-3): far above float32 rounding (~3e-5)


def _ref(name):
    with np.load(DATA / name / "reference.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _least_gap(router_logits: np.ndarray, k: int) -> float:
    """[..., expert] → the least gap between neighbouring logits of the top k + 1 (a tie there would make the
    choice or its order depend on rounding)."""
    top = -np.sort(-router_logits, axis=-1)[..., : k + 1]
    return float((top[..., :-1] - top[..., 1:]).min())


@pytest.fixture(scope="module")
def naive():
    """moe_forward of each fixture's folder for prompts 0 and 1, once."""
    made = {}

    def get(name):
        if name not in made:
            cfg, w = moe_folder(DATA / name)
            ref = _ref(name)
            made[name] = cfg, [moe_forward(cfg, w, ref[f"input_ids_{k}"].tolist()) for k in (0, 1)]
        return made[name]

    return get


@pytest.mark.parametrize("name", MOE)
def test_the_naive_moe_forward_gives_transformers_numbers(naive, name):
    cfg, outs = naive(name)
    ref = _ref(name)
    np.testing.assert_array_equal(ref["moe_layers"], outs[0]["moe_layers"])
    for k, out in enumerate(outs):
        np.testing.assert_allclose(out["logits"], ref[f"logits_{k}"], rtol=0, atol=1e-4)
        np.testing.assert_allclose(out["hidden_states"], ref[f"hidden_states_{k}"], rtol=0, atol=1e-4)
        np.testing.assert_allclose(out["mlp_out"], ref[f"mlp_out_{k}"], rtol=0, atol=1e-4)
        np.testing.assert_allclose(out["attentions"], ref[f"attentions_{k}"], rtol=0, atol=1e-5)
        np.testing.assert_allclose(out["router_logits"], ref[f"router_logits_{k}"], rtol=0, atol=1e-4)
        np.testing.assert_array_equal(out["expert_indices"], ref[f"expert_indices_{k}"])  # the same experts, same order
        np.testing.assert_allclose(out["expert_weights"], ref[f"expert_weights_{k}"], rtol=0, atol=1e-5)
        np.testing.assert_allclose(out["expert_outputs"], ref[f"expert_outputs_{k}"], rtol=0, atol=1e-4)
        if cfg["model_type"] == "gpt_oss":
            np.testing.assert_allclose(out["sink_share"], ref[f"sink_share_{k}"], rtol=0, atol=1e-5)
        if cfg["model_type"] == "qwen2_moe":
            np.testing.assert_allclose(out["shared_expert_gate"], ref[f"shared_expert_gate_{k}"], rtol=0, atol=1e-5)
            np.testing.assert_allclose(out["shared_expert_out"], ref[f"shared_expert_out_{k}"], rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", MOE)
def test_the_fixtures_route_far_from_ties_and_far_from_uniform(name):
    """Every prompt position of every MoE layer: the top k + 1 router logits at least ROUTER_MARGIN apart (the
    tool checked the greedy continuations too); the weights are not all equal, and the k-th expert counts."""
    ref = _ref(name)
    cfg, _ = moe_folder(DATA / name)
    k = cfg["num_experts_per_tok"]
    for p in (0, 1):
        assert _least_gap(ref[f"router_logits_{p}"], k) >= ROUTER_MARGIN
        w = ref[f"expert_weights_{p}"]  # [moe_layer, pos, k], most weight first
        assert (np.diff(w, axis=-1) <= 0).all() and np.median(w[..., -1]) > 0.05
        np.testing.assert_allclose(ref[f"router_margins_{p}"], -np.diff(-np.sort(-ref[f"router_logits_{p}"], -1)[..., k - 1 : k + 1], axis=-1)[..., 0], atol=1e-6)


def test_each_family_weighs_its_experts_its_own_way():
    """Hand arithmetic on stored router logits: gpt-oss softmaxes its top 2 logits; Qwen3-MoE and Mixtral
    renormalise softmax(all) over the chosen; OLMoE and Qwen2-MoE keep softmax(all)'s share (sum below 1)."""
    for name, rule in [("gpt-oss-tiny", "topk-softmax"), ("qwen3-moe-tiny", "renorm"), ("mixtral-tiny", "renorm"),
                       ("olmoe-tiny", "share"), ("qwen2-moe-tiny", "share")]:
        ref = _ref(name)
        logits, idx, w = ref["router_logits_0"][0, 3], ref["expert_indices_0"][0, 3], ref["expert_weights_0"][0, 3]
        chosen = logits[idx]
        if rule == "topk-softmax":
            want = np.exp(chosen - chosen.max()) / np.exp(chosen - chosen.max()).sum()
        else:
            share = np.exp(chosen - logits.max()) / np.exp(logits - logits.max()).sum()
            want = share / share.sum() if rule == "renorm" else share
        np.testing.assert_allclose(w, want, rtol=1e-5)
        assert (abs(w.sum() - 1) < 1e-5) == (rule != "share")


def test_gpt_oss_sinks_take_part_of_the_attention():
    ref = _ref("gpt-oss-tiny")
    share = ref["sink_share_0"]  # [layer, head, pos]
    np.testing.assert_allclose(ref["attentions_0"].sum(-1) + share, 1, atol=1e-6)
    assert share.min() > 0 and share.max() > 0.2
    # layer 0 slides (window 4): no query sees a key 4 or more places back
    pattern = ref["attentions_0"][0]
    q, k = np.indices(pattern.shape[1:])
    assert (pattern[:, q - k >= 4] == 0).all() and (pattern[:, (q - k < 4) & (q >= k)] > 0).all()


def test_yarn_frequencies_as_transformers_computes_them_for_the_folder():
    cfg, _ = moe_folder(DATA / "gpt-oss-tiny")
    ref = _ref("gpt-oss-tiny")
    freqs, scale = rope_frequencies(cfg)
    np.testing.assert_allclose(freqs, ref["inv_freq"], rtol=1e-6)
    np.testing.assert_allclose(scale, float(ref["attention_scaling"]), rtol=1e-7)
    np.testing.assert_allclose(scale, 0.1 * math.log(32) + 1, rtol=1e-12)  # YaRN's mscale for factor 32


def test_yarn_correction_range_by_hand():
    """head_dim 16, base 150000, 4096 original positions: dim·ln(4096 / (2π·β)) / (2·ln 150000) is 2.021… for
    β_fast 32 and 4.348… for β_slow 1; llama.cpp (and transformers with truncate true) use 2 and 5."""
    cfg, _ = moe_folder(DATA / "gpt-oss-tiny")
    rp = cfg["rope_parameters"]
    low, high = _yarn_range(rp, 16, floor_ceil=False)
    assert abs(low - 16 * math.log(4096 / (2 * math.pi * 32)) / (2 * math.log(150000))) < 1e-12 and 2 < low < 2.1
    assert 4.3 < high < 4.4
    assert _yarn_range(rp, 16, floor_ceil=True) == (2, 5)
    truncated = {**cfg, "rope_parameters": {**rp, "truncate": True}}
    assert rope_frequencies(truncated) == rope_frequencies(cfg, "llama.cpp")


def test_yarn_frequencies_as_ggml_computes_them_for_a_gguf_file():
    """ggml-cpu's rope_yarn, written again here in float32 the way ops.cpp runs it: theta_extrap grows by
    theta_scale = base^(−2/n_dims) pair by pair, ramp = 1 − clamp((i0/2 − low) / max(0.001, high − low)),
    theta = theta_interp·(1 − ramp) + theta_extrap·ramp, mscale = 1 + 0.1·ln(1/freq_scale)."""
    cfg, _ = moe_folder(DATA / "gpt-oss-tiny")
    freqs, scale = rope_frequencies(cfg, "llama.cpp")
    n_dims, base, freq_scale = 16, np.float32(150000.0), np.float32(1 / 32)
    low, high = 2.0, 5.0  # ggml_rope_yarn_corr_dims: floorf / ceilf
    theta_scale = np.float32(base ** np.float32(-2.0 / n_dims))
    theta, got = np.float32(1.0), []  # position 1: theta_extrap is the pair's frequency
    for i0 in range(0, n_dims, 2):
        ramp = 1 - min(1.0, max(0.0, (i0 // 2 - low) / max(0.001, high - low)))
        got.append(float(freq_scale * theta * (1 - ramp) + theta * ramp))
        theta = np.float32(theta * theta_scale)
    np.testing.assert_allclose(freqs, got, rtol=1e-5)
    np.testing.assert_allclose(scale, 1 + 0.1 * math.log(32), rtol=1e-7)


def test_the_two_yarn_rules_give_different_numbers_on_gpt_oss_tiny(naive):
    """So a decoder that computed a folder's YaRN llama.cpp's way (or a GGUF file's transformers' way) fails."""
    cfg, outs = naive("gpt-oss-tiny")
    _, w = moe_folder(DATA / "gpt-oss-tiny")
    ids = _ref("gpt-oss-tiny")["input_ids_0"].tolist()
    other = moe_forward(cfg, w, ids, rope="llama.cpp")
    assert np.abs(other["logits"] - outs[0]["logits"]).max() > 1e-3


# --------------------------------------------------------------------------- GGUF files


def _gguf(path):
    import gguf

    r = gguf.GGUFReader(str(path))
    return r, {t.name: t for t in r.tensors}


def _field(reader, key):
    f = reader.fields[key]
    return f.contents()


@pytest.mark.parametrize("name", list(PRE))
def test_a_moe_gguf_file_reads_back_as_its_folder(gguf_of_folder, gguf_moe_weights, name):
    pytest.importorskip("gguf")
    _, w = moe_folder(DATA / name)
    back = gguf_moe_weights(gguf_of_folder(DATA / name, PRE[name]), DATA / name)
    assert sorted(back) == sorted(w)
    for n in w:
        np.testing.assert_array_equal(back[n], w[n], err_msg=n)  # F32: exactly


@pytest.mark.parametrize("name, arch", [("gpt-oss-tiny", "gpt-oss"), ("qwen3-moe-tiny", "qwen3moe"), ("olmoe-tiny", "olmoe"),
                                        ("mixtral-tiny", "llama")])
def test_a_moe_gguf_file_has_llama_cpp_names_shapes_and_keys(gguf_of_folder, name, arch):
    """The experts as llama.cpp's loader creates them (llama-model.cpp): ffn_gate_inp {d_model, expert},
    ffn_gate_exps / ffn_up_exps {d_model, d_mlp, expert}, ffn_down_exps {d_mlp, d_model, expert} (GGUF's ne,
    fastest first), each expert's matrix taken from the folder as the converter does; expert_count and
    expert_used_count; gpt-oss's sinks, biases, window and YaRN keys (no `truncate`: llama.cpp has none)."""
    pytest.importorskip("gguf")
    cfg, w = moe_folder(DATA / name)
    r, t = _gguf(gguf_of_folder(DATA / name, PRE[name]))
    d, E = cfg["hidden_size"], cfg.get("num_local_experts") or cfg["num_experts"]
    I = cfg["intermediate_size"] if arch in ("gpt-oss", "olmoe", "llama") else cfg["moe_intermediate_size"]
    assert _field(r, "general.architecture") == arch
    assert _field(r, f"{arch}.expert_count") == E and _field(r, f"{arch}.expert_used_count") == 2
    for l in range(cfg["num_hidden_layers"]):
        b = f"blk.{l}."
        assert list(t[b + "ffn_gate_inp.weight"].shape) == [d, E]
        assert list(t[b + "ffn_gate_exps.weight"].shape) == list(t[b + "ffn_up_exps.weight"].shape) == [d, I, E]
        assert list(t[b + "ffn_down_exps.weight"].shape) == [I, d, E]
    gate, up, down = (np.asarray(t[f"blk.1.ffn_{x}_exps.weight"].data) for x in ("gate", "up", "down"))  # [E, rows, cols]
    if arch == "gpt-oss":
        gu = w["model.layers.1.mlp.experts.gate_up_proj"]  # [expert, d_model, 2·d_mlp]: columns gate, up, gate, up, …
        np.testing.assert_array_equal(gate[3], gu[3][:, 0::2].T)
        np.testing.assert_array_equal(up[3], gu[3][:, 1::2].T)
        np.testing.assert_array_equal(down[3], w["model.layers.1.mlp.experts.down_proj"][3].T)
        np.testing.assert_array_equal(np.asarray(t["blk.1.ffn_up_exps.bias"].data),
                                      w["model.layers.1.mlp.experts.gate_up_proj_bias"][:, 1::2])
        assert list(t["blk.0.attn_sinks.weight"].shape) == [cfg["num_attention_heads"]]
        assert list(t["blk.0.ffn_gate_inp.bias"].shape) == [E] and "blk.0.post_attention_norm.weight" in t
        assert _field(r, "gpt-oss.attention.sliding_window") == 4 and _field(r, "gpt-oss.expert_feed_forward_length") == 32
        assert _field(r, "gpt-oss.rope.scaling.type") == "yarn" and _field(r, "gpt-oss.rope.scaling.factor") == 32
        assert _field(r, "gpt-oss.rope.scaling.original_context_length") == 4096
        assert _field(r, "gpt-oss.rope.scaling.yarn_beta_fast") == 32 and _field(r, "gpt-oss.rope.scaling.yarn_beta_slow") == 1
        assert _field(r, "gpt-oss.rope.freq_base") == 150000 and not any("truncate" in k for k in r.fields)
    else:
        stem = "block_sparse_moe.experts.3.w" if arch == "llama" else "mlp.experts.3."
        names = ("1", "3", "2") if arch == "llama" else ("gate_proj", "up_proj", "down_proj")
        for got, n in zip((gate, up, down), names):
            np.testing.assert_array_equal(got[3], w[f"model.layers.1.{stem}{n}.weight"])
    if arch == "llama":  # Mixtral's Q rows permuted as LlamaModel.permute does: each head's halves interleaved
        q = w["model.layers.0.self_attn.q_proj.weight"]
        H = cfg["num_attention_heads"]
        want = q.reshape(H, 2, q.shape[0] // H // 2, d).swapaxes(1, 2).reshape(q.shape)
        np.testing.assert_array_equal(np.asarray(t["blk.0.attn_q.weight"].data), want)
        assert _field(r, "llama.rope.dimension_count") == 16
    if arch == "qwen3moe":
        assert _field(r, "qwen3moe.expert_feed_forward_length") == 16


def test_gpt_oss_experts_in_mxfp4(gguf_of_folder, gguf_moe_weights):
    """The three expert matrices of each layer in MXFP4 (blocks of 32 four-bit E2M1 values with one E8M0 scale:
    17 bytes), every other tensor F32 and exact; de-quantized, each block within its rounding: the scale is
    2^(⌊log2 max|w|⌋ − 2), the largest step between E2M1 values 2 scales, values above 6 scales clipped."""
    gguf = pytest.importorskip("gguf")
    folder = DATA / "gpt-oss-tiny"
    path = gguf_of_folder(folder, "gpt-2", "MXFP4")
    _, t = _gguf(path)
    mxfp4 = {n for n, x in t.items() if x.tensor_type == gguf.GGMLQuantizationType.MXFP4}
    assert mxfp4 == {f"blk.{l}.ffn_{x}_exps.weight" for l in (0, 1) for x in ("gate", "up", "down")}
    assert all(x.tensor_type == gguf.GGMLQuantizationType.F32 for n, x in t.items() if n not in mxfp4)
    _, w = moe_folder(folder)
    back = gguf_moe_weights(path, folder)
    for n in w:
        if "experts." in n and not n.endswith("_bias"):
            rows = w[n].transpose(0, 2, 1) if n.endswith("gate_up_proj") else w[n].transpose(0, 2, 1)
            blocks = rows.reshape(-1, 32)  # GGUF's rows run along the input: [expert, out, in] blocks of 32
            got = (back[n].transpose(0, 2, 1)).reshape(-1, 32)
            bound = 2.0 ** (np.floor(np.log2(np.abs(blocks).max(-1))) - 1)
            assert (np.abs(got - blocks) <= bound[:, None] + 1e-12).all(), n
            assert not np.array_equal(got, blocks)
        else:
            np.testing.assert_array_equal(back[n], w[n], err_msg=n)


def test_mxfp4_blocks_as_llama_cpp_repacks_gpt_oss_own_files(gguf_of_folder):
    """gpt-oss folders on the Hub keep their experts as `*_blocks` (two E2M1 codes a byte: element 2j low, 2j+1
    high) and `*_scales` (the E8M0 byte); convert_hf_to_gguf.py's GptOssModel.repack_mxfp4 puts the scale first and
    reorders the nibbles (transform_nibble_layout: element j low, j + 16 high). Written again here in numpy, that
    repacking of the Hub layout rebuilt from a block reproduces the GGUF's bytes, and the Hub's FP4 table
    (±0, 0.5, 1, 1.5, 2, 3, 4, 6 × 2^(scale − 127)) gives gguf's de-quantized values."""
    gguf = pytest.importorskip("gguf")
    _, t = _gguf(gguf_of_folder(DATA / "gpt-oss-tiny", "gpt-2", "MXFP4"))
    raw = np.asarray(t["blk.0.ffn_down_exps.weight"].data).reshape(-1, 17)  # [block, scale + 16 bytes]
    scale, qs = raw[:, 0], raw[:, 1:]
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=1)  # ggml: element j low nibble, j + 16 high
    hub = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)  # the Hub's: element 2j low, 2j + 1 high

    def transform_nibble_layout(tensor):  # conversion/gpt_oss.py's, in numpy
        t_ = ((tensor & 0x0F) << 4) | ((tensor & 0xF0) >> 4)
        blk_a, blk_b = t_[:, :8], t_[:, 8:]
        blk_a = np.stack([blk_a & 0xF0, (blk_a << 4) & 0xF0], axis=2).reshape(-1, 16)
        blk_b = np.stack([blk_b >> 4, blk_b & 0x0F], axis=2).reshape(-1, 16)
        out = blk_a | blk_b
        return ((out & 0xF0) >> 4) | ((out & 0x0F) << 4)

    np.testing.assert_array_equal(np.concatenate([scale[:, None], transform_nibble_layout(hub)], axis=1), raw)
    fp4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
    values = np.stack([fp4[hub & 0x0F], fp4[hub >> 4]], axis=2).reshape(-1, 32) * 2.0 ** (scale.astype(np.float64) - 127)[:, None]
    np.testing.assert_array_equal(values, gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.MXFP4).reshape(-1, 32))


def test_the_mxfp4_files_reference_routes_far_from_ties_and_differs_from_the_folders(moe_gguf_reference, naive):
    """The reference for gpt-oss-tiny's MXFP4 GGUF (its de-quantized weights, llama.cpp's YaRN): no top-k choice
    near a tie, on the prompts and the greedy continuations; greedy steps far from ties; its logits differ from the
    folder's (the experts' rounding and the YaRN range both count)."""
    ref = moe_gguf_reference(DATA / "gpt-oss-tiny", "gpt-2", "MXFP4")
    _, outs = naive("gpt-oss-tiny")
    for k in (0, 1):
        assert _least_gap(ref[k]["router_logits"], 2) >= ROUTER_MARGIN
        assert ref[k]["least_router_gap"] >= ROUTER_MARGIN and ref[k]["greedy_margins"].min() > 1e-3
        assert len(ref[k]["greedy_ids"]) == 8
        assert np.abs(ref[k]["logits"] - outs[k]["logits"]).max() > 1e-3


def test_an_f32_gguf_files_reference_is_its_folders_but_for_yarn(moe_gguf_reference):
    """Read back exactly, an F32 file's reference is the folder's (qwen3moe: logits and greedy tokens as
    transformers'); gpt-oss's F32 file still differs, by llama.cpp's YaRN range alone."""
    ref = _ref("qwen3-moe-tiny")
    gguf_ref = moe_gguf_reference(DATA / "qwen3-moe-tiny", "qwen2")
    np.testing.assert_allclose(gguf_ref[0]["logits"], ref["logits_0"], rtol=0, atol=1e-4)
    np.testing.assert_array_equal(gguf_ref[1]["greedy_ids"], ref["greedy_ids_1"])
    oss = moe_gguf_reference(DATA / "gpt-oss-tiny", "gpt-2")
    assert np.abs(oss[0]["logits"] - _ref("gpt-oss-tiny")["logits_0"]).max() > 1e-3
