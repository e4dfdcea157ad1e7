"""The trained agents this package ships: one LoRA adapter per rhythm on the embedded SmolLM2-135M.

`sparse_react/adapters/<rhythm>/` holds each adapter (peft's `adapter_config.json` and
`adapter_model.safetensors`), its `sparse_react.json` card (how it was made and what it scored) and
a README. `ShippedPolicy` plays every rhythm with that rhythm's adapter, merged into the base at
load, so `--rhythms sparse,dense,im,act` compares four trained agents in one run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from sparse_react.agent import Context, Decision, Request
from sparse_react.bundled import ADAPTERS_DIR
from sparse_react.policies.hf import HFPolicy
from sparse_react.training.cards import ADAPTER_CONFIG, ModelError


def shipped_rhythms() -> list[str]:
    """The rhythms a trained adapter ships for."""
    return sorted(p.parent.name for p in ADAPTERS_DIR.glob(f"*/{ADAPTER_CONFIG}"))


def shipped_adapter(rhythm: str) -> Path:
    """The folder of the adapter trained for `rhythm`; ModelError naming the choices when none ships."""
    folder = ADAPTERS_DIR / rhythm
    if not (folder / ADAPTER_CONFIG).is_file():
        have = ", ".join(shipped_rhythms()) or "none"
        raise ModelError(f"no trained adapter ships for the {rhythm} rhythm (shipped: {have}); play the untuned "
                         f"base with --model base, or train one (`sparse-react finetune --lora`) and pass --model DIR")
    return folder


class ShippedPolicy:
    """Each episode played by the shipped adapter of its rhythm, each loaded the first time its
    rhythm plays. `settings` go to every HFPolicy (action_mode, device, dtype, window, ...)."""

    name = "hf"
    batched = True
    shots = 0  # the adapters were trained zero-shot, as their cards say

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.policies: dict[str, HFPolicy] = {}

    def policy(self, rhythm: str) -> HFPolicy:
        """The loaded policy of `rhythm` (loading it now if this is its first episode)."""
        if rhythm not in self.policies:
            self.policies[rhythm] = HFPolicy(model=shipped_adapter(rhythm), **self.settings)
        return self.policies[rhythm]

    def prepare(self, rhythms: Sequence[str]) -> None:
        """Load the adapter of every rhythm about to play now, so a missing one fails before any game."""
        for rhythm in rhythms:
            self.policy(rhythm)

    def spec(self) -> dict:
        """The spec of each rhythm's loaded adapter."""
        return {"kind": "shipped", "rhythms": {r: p.spec() for r, p in sorted(self.policies.items())}}

    def start(self, context: Context) -> None:
        self.policy(context.rhythm.name).start(context)

    def end(self, context: Context) -> None:
        self.policy(context.rhythm.name).end(context)

    def decide(self, requests: Sequence[Request]) -> list[Decision | Exception]:
        """Each rhythm's requests decided together by its own model, answers in request order."""
        by_rhythm: dict[str, list[int]] = {}
        for index, (context, _) in enumerate(requests):
            by_rhythm.setdefault(context.rhythm.name, []).append(index)
        out: list[Decision | Exception | None] = [None] * len(requests)
        for rhythm, indices in by_rhythm.items():
            for index, decision in zip(indices, self.policy(rhythm).decide([requests[i] for i in indices])):
                out[index] = decision
        return out  # type: ignore[return-value]
