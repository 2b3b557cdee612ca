"""`--ablate`'s value, parsed once: `Ablation.parse("1:0")` reads L:H, L:H:mean, L:* (every head of
layer L), L:mlp or L:expert:E (expert E of a mixture of experts taken out of the routing) into a frozen `Ablation`, which is checked against a model, gives its hooks
(`tracer.run.interventions`), its words and the heads it removes: what the run, `--json`'s `ablation`
and the page all read, so the text is never parsed again. Standard library only (the CLI reads the
option with it, at start-up, before numpy is imported); a refusal names the value, the CLI adds the flag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ValueRefused

ABLATION = re.compile(r"([0-9]{1,4}):(\*|mlp|[0-9]{1,4}|expert:[0-9]{1,5})(?::(zero|mean))?")


@dataclass(frozen=True)
class Ablation:
    """A part of the model removed, as `--ablate` names it (`Ablation.parse("1:0")`, parsed once): head
    `head` of layer `layer`, every head of it (`head == "*"`) or its MLP (`head == "mlp"`), set to zeros
    or (heads) to its mean over the pass's positions (`how`)."""

    layer: int
    head: int | str  # a head's number, "*" (every head of the layer), "mlp", or "expert"
    how: str = "zero"  # "zero" | "mean"
    expert: int | None = None  # with head "expert": the expert taken out of the routing

    @classmethod
    def parse(cls, text) -> "Ablation":
        """L:H, L:H:mean, L:* or L:mlp (any case, spaces around), in ASCII digits; else a ValueRefused naming the text."""
        if isinstance(text, cls):
            return text
        m = ABLATION.fullmatch(str(text).strip().lower())
        if m is None:
            raise ValueRefused(f"{str(text)[:40]!r} is not an ablation: expected LAYER:HEAD, LAYER:HEAD:mean, LAYER:*, "
                               f"LAYER:mlp or LAYER:expert:E (e.g. 1:0)", "ablate")
        head, how = m.group(2), m.group(3) or "zero"
        if head == "mlp" and how == "mean":
            raise ValueRefused(f"{str(text)[:40]!r}: an MLP is removed by zeros only (LAYER:mlp)", "ablate")
        if head.startswith("expert:") and how == "mean":
            raise ValueRefused(f"{str(text)[:40]!r}: an expert is taken out of the routing, not averaged "
                               f"(LAYER:expert:E)", "ablate")
        if head.startswith("expert:"):
            return cls(int(m.group(1)), "expert", how, int(head.split(":")[1]))
        return cls(int(m.group(1)), head if head in ("*", "mlp") else int(head), how)

    def __str__(self) -> str:
        if self.head == "expert":
            return f"{self.layer}:expert:{self.expert}"
        return f"{self.layer}:{self.head}" + (":mean" if self.how == "mean" else "")

    def check(self, cfg) -> "Ablation":
        """This ablation, when the model has what it names; else a ValueRefused naming it."""
        if self.layer >= cfg.n_layers:
            raise ValueRefused(f"{self} names layer {self.layer}; the model has layers 0–{cfg.n_layers - 1}", "ablate")
        if self.head == "mlp" and not cfg.mlp:
            raise ValueRefused(f"{self} names layer {self.layer}'s MLP; this model has no MLP", "ablate")
        heads = cfg.attention_of(self.layer).n_heads(cfg)  # a linear-attention layer counts its value heads
        if isinstance(self.head, int) and self.head >= heads:
            raise ValueRefused(f"{self} names head {self.head}; layer {self.layer} has heads 0–{heads - 1}", "ablate")
        if self.head == "expert":
            kind = cfg.mlp_of(self.layer)
            if kind is None or not kind.records(cfg, "hook_router_logits"):
                raise ValueRefused(f"{self} names an expert of layer {self.layer}, whose MLP routes to no experts", "ablate")
            if self.expert >= cfg.n_experts:
                raise ValueRefused(f"{self} names expert {self.expert}; layer {self.layer} has experts 0–{cfg.n_experts - 1}",
                                   "ablate")
        return self

    @property
    def words(self) -> str:
        """'head 1:0', 'every head of layer 2 (mean)', "layer 1's MLP": what the record and the header say."""
        mean = " (mean)" if self.how == "mean" else ""
        if self.head == "mlp":
            return f"layer {self.layer}'s MLP"
        if self.head == "expert":
            return f"expert {self.expert} of layer {self.layer}"
        return (f"every head of layer {self.layer}" if self.head == "*" else f"head {self.layer}:{self.head}") + mean

    def heads(self, cfg) -> list[list[int]]:
        """The [layer, head] pairs it removes (none for an MLP)."""
        if self.head in ("mlp", "expert"):
            return []
        every = range(cfg.attention_of(self.layer).n_heads(cfg))
        return [[self.layer, h] for h in (every if self.head == "*" else [self.head])]

    def hooks(self, cfg) -> dict:
        """Its hooks (`tracer.run.interventions`), checked against the model first."""
        from .interventions import ablate_attention, ablate_expert, ablate_head, ablate_mlp

        self.check(cfg)
        if self.head == "mlp":
            return ablate_mlp(self.layer)
        if self.head == "expert":
            return ablate_expert(self.layer, self.expert)
        if self.head == "*":
            return ablate_attention(self.layer, cfg.attention_of(self.layer).n_heads(cfg), self.how)
        return ablate_head(self.layer, self.head, self.how)


def removed_heads(ablations, cfg) -> list[list[int]]:
    """The [layer, head] pairs `ablations` remove (L:H and L:*; an MLP removes no head), each once, in order."""
    out: list[list[int]] = []
    for a in ablations:
        out += [pair for pair in a.heads(cfg) if pair not in out]
    return out


def check_experts_left(ablations, cfg) -> None:
    """Every layer keeps at least experts_per_token experts to route to; else a ValueRefused naming the layer."""
    gone: dict[int, set] = {}
    for a in ablations:
        if a.head == "expert":
            gone.setdefault(a.layer, set()).add(a.expert)
    for layer, experts in gone.items():
        left = cfg.n_experts - len(experts)
        if left < cfg.experts_per_token:
            raise ValueRefused(f"removing experts {', '.join(map(str, sorted(experts)))} leaves layer {layer} {left} of "
                               f"{cfg.n_experts}, fewer than the {cfg.experts_per_token} each token is sent to", "ablate")
