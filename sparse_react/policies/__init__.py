"""Policies: what writes the next line of an episode. Each follows `sparse_react.agent.Policy`."""

from __future__ import annotations

from pathlib import Path

from sparse_react.policies.base import PolicyError
from sparse_react.policies.expert import ExpertPolicy, RelabellingExpertPolicy, SearchingExpertPolicy
from sparse_react.policies.random_admissible import RandomPolicy
from sparse_react.policies.scripted import ScriptedPolicy

POLICY_NAMES = ("hf", "hf:base", "hf:MODEL", "served", "expert", "search-expert", "relabel-expert", "random", "scripted:FILE")
BASE_MODEL = "base"  # `--model base`: the untuned embedded SmolLM2-135M-Instruct


def make_policy(spec: str, seed: int = 0, **model_settings):
    """A policy from its command-line name: `hf` (the shipped trained adapter of each episode's
    rhythm), `hf:base` (the untuned embedded model), `hf:MODEL` (a local model folder, adapter
    folder or .gguf file), `expert` (knows where everything is), `search-expert` (searches
    likely places first), `relabel-expert` (the search expert from what the episode showed, never
    the planner), `random` or `scripted:FILE` (one line per turn), `served` (a model on an
    OpenAI-compatible server: `model_settings` name its endpoint and model).
    `model_settings` go to HFPolicy (action_mode, device, dtype, temperature, ...) or ServedPolicy."""
    if spec.startswith("hf"):
        # torch and transformers load only when a model policy is asked for: the others start in a blink
        from sparse_react.policies.hf import HFPolicy
        from sparse_react.policies.shipped import ShippedPolicy

        if spec == "hf":
            return ShippedPolicy(seed=seed, **model_settings)
        if spec.startswith("hf:"):
            model = spec[3:]
            return HFPolicy(model=None if model == BASE_MODEL else model, seed=seed, **model_settings)
    if spec == "served":
        from sparse_react.policies.served import ServedPolicy

        if not model_settings.get("endpoint") or not model_settings.get("model"):
            raise PolicyError("the served policy needs --endpoint URL and --model NAME (the name the server gives it)")
        return ServedPolicy(seed=seed, **model_settings)
    if spec == "expert":
        return ExpertPolicy()
    if spec == "search-expert":
        return SearchingExpertPolicy()
    if spec == "relabel-expert":
        return RelabellingExpertPolicy()
    if spec == "random":
        return RandomPolicy(seed)
    if spec.startswith("scripted:"):
        return ScriptedPolicy.from_file(Path(spec.split(":", 1)[1]))
    raise PolicyError(f"unknown policy {spec!r}; one of {', '.join(POLICY_NAMES)}")


MODEL_SETTINGS = ("action_mode", "device", "dtype", "temperature", "shots", "window", "max_thought_tokens")
SERVED_SETTINGS = ("endpoint", "model", "api", "tokenizer", "action_mode", "temperature", "shots", "window",
                   "max_thought_tokens")


def policy_from_spec(name: str, spec: dict, seed: int = 0, endpoint: str | None = None):
    """The policy a record was made with, rebuilt from its spec: a model from its path with the
    same settings (dtype, device, sampling, ...), the shipped adapters with theirs, the random
    policy with its seed; any other by its name.

    A record is untrusted input: its endpoint is never contacted. A served model carries on at
    `endpoint`, the server the user named in this invocation (its key from the environment);
    without one, PolicyError says to name it."""
    kind = spec.get("kind")
    if kind == "shipped" and spec.get("rhythms"):
        first = next(iter(spec["rhythms"].values()))
        return make_policy("hf", first.get("seed", seed), **{k: first[k] for k in MODEL_SETTINGS if k in first})
    if kind == "hf":
        return make_policy(f"hf:{spec['model']}", spec.get("seed", seed),
                           **{k: spec[k] for k in MODEL_SETTINGS if k in spec})
    if kind == "served":
        if not endpoint:
            raise PolicyError(f"this episode was played by the served model {spec.get('model')!r}; the endpoint a "
                              "record names is never contacted: name the server to carry on with (--endpoint URL)")
        settings = {k: spec[k] for k in SERVED_SETTINGS if k in spec and k != "endpoint"}
        return make_policy("served", spec.get("seed", seed), endpoint=endpoint, **settings)
    if kind == "random":
        return RandomPolicy(spec.get("seed", seed))
    return make_policy(name, seed)
