"""Policies: what writes the next line of an episode. Each follows `sparse_react.agent.Policy`."""

from __future__ import annotations

from pathlib import Path

POLICY_NAMES = ("hf", "hf:base", "hf:MODEL", "expert", "search-expert", "random", "scripted:FILE")
BASE_MODEL = "base"  # `--model base`: the untuned embedded SmolLM2-135M-Instruct


class PolicyError(ValueError):
    """An unknown policy name or an unusable policy file; the message names it."""


def make_policy(spec: str, seed: int = 0, **model_settings):
    """A policy from its command-line name: `hf` (the shipped trained adapter of each episode's
    rhythm), `hf:base` (the untuned embedded model), `hf:MODEL` (a local model folder, adapter
    folder or .gguf file), `expert` (knows where everything is), `search-expert` (searches
    likely places first), `random` or `scripted:FILE` (one line per turn).
    `model_settings` go to HFPolicy (action_mode, device, dtype, temperature, ...)."""
    from sparse_react.policies.expert import ExpertPolicy, SearchingExpertPolicy
    from sparse_react.policies.random_admissible import RandomPolicy
    from sparse_react.policies.scripted import ScriptedPolicy

    if spec == "hf":
        from sparse_react.policies.shipped import ShippedPolicy

        return ShippedPolicy(seed=seed, **model_settings)
    if spec.startswith("hf:"):
        from sparse_react.policies.hf import HFPolicy

        model = spec[3:]
        return HFPolicy(model=None if model == BASE_MODEL else model, seed=seed, **model_settings)
    if spec == "expert":
        return ExpertPolicy()
    if spec == "search-expert":
        return SearchingExpertPolicy()
    if spec == "random":
        return RandomPolicy(seed)
    if spec.startswith("scripted:"):
        return ScriptedPolicy.from_file(Path(spec.split(":", 1)[1]))
    raise PolicyError(f"unknown policy {spec!r}; one of {', '.join(POLICY_NAMES)}")
