"""The trained agents this package ships: one LoRA adapter per rhythm on the embedded SmolLM2-135M.

`sparse_react/adapters/<rhythm>/` holds each adapter (peft's `adapter_config.json` and
`adapter_model.safetensors`), its `sparse_react.json` card (how it was made and what it scored) and
a README. `ShippedPolicy` plays every rhythm with that rhythm's adapter, merged into the base at
load, so `--rhythms sparse,dense,im,act` compares four trained agents in one run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from sparse_react.agent import Decision
from sparse_react.bundled import PACKAGE
from sparse_react.policies.hf import HFPolicy, ModelError

ADAPTERS_DIR = PACKAGE / "adapters"


def shipped_rhythms() -> list[str]:
    """The rhythms a trained adapter ships for."""
    return sorted(p.parent.name for p in ADAPTERS_DIR.glob("*/adapter_config.json"))


def shipped_adapter(rhythm: str) -> Path:
    """The folder of the adapter trained for `rhythm`; ModelError naming the choices when none ships."""
    folder = ADAPTERS_DIR / rhythm
    if not (folder / "adapter_config.json").is_file():
        have = ", ".join(shipped_rhythms()) or "none"
        raise ModelError(f"no trained adapter ships for the {rhythm} rhythm (shipped: {have}); play the untuned "
                         f"base with --model base, or train one (`sparse-react finetune --lora`) and pass --model DIR")
    return folder


class ShippedPolicy:
    """Each episode played by the shipped adapter of its rhythm, each loaded the first time its
    rhythm plays. `settings` go to every HFPolicy (action_mode, device, dtype, window, ...)."""

    name = "hf"
    shots = 0  # the adapters were trained zero-shot, as their cards say

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.policies: dict[str, HFPolicy] = {}
        self.last_mode: str | None = None
        self.last_tokens = 0

    def policy(self, rhythm: str) -> HFPolicy:
        """The loaded policy of `rhythm` (loading it now if this is its first episode)."""
        if rhythm not in self.policies:
            self.policies[rhythm] = HFPolicy(model=shipped_adapter(rhythm), **self.settings)
        return self.policies[rhythm]

    @property
    def free_actions(self) -> int:
        return sum(p.free_actions for p in self.policies.values())

    @property
    def invalid_rate(self) -> float:
        free = self.free_actions
        return sum(p.invalid_actions for p in self.policies.values()) / free if free else 0.0

    def start(self, env: Any, context: Any) -> None:
        self.policy(context.rhythm.name).start(env, context)

    def end(self, context: Any) -> None:
        self.policy(context.rhythm.name).end(context)

    def next_line(self, context: Any, admissible: Sequence[str]) -> str:
        policy = self.policy(context.rhythm.name)
        line = policy.next_line(context, admissible)
        self.last_mode, self.last_tokens = policy.last_mode, policy.last_tokens
        return line

    def next_lines(self, requests: Sequence[tuple[Any, Sequence[str]]]) -> list[Decision]:
        """Each rhythm's requests decided together by its own model, answers in request order."""
        by_rhythm: dict[str, list[int]] = {}
        for index, (context, _) in enumerate(requests):
            by_rhythm.setdefault(context.rhythm.name, []).append(index)
        out: list[Decision | None] = [None] * len(requests)
        for rhythm, indices in by_rhythm.items():
            for index, decision in zip(indices, self.policy(rhythm).next_lines([requests[i] for i in indices])):
                out[index] = decision
        return out  # type: ignore[return-value]


def ship_adapter(model_dir: Path, commands: Sequence[str], eval_runs: Sequence[Path]) -> Path:
    """Copy a trained adapter into the package as its rhythm's shipped agent, with a card that adds
    the commands that made it and the results measured with it (from the evaluation runs' records)."""
    import hashlib
    import json
    import shutil

    from sparse_react.policies.hf import ADAPTER_CONFIG, ADAPTER_WEIGHTS, MODEL_CARD
    from sparse_react.report import COLUMNS, group_stats, load_runs

    card = json.loads((model_dir / MODEL_CARD).read_text())
    if card.get("kind") != "lora":
        raise ModelError(f"{model_dir} is not a LoRA adapter (its card says kind {card.get('kind')!r})")
    games = card.pop("train_games")
    card.update(base=card["base_identity"]["file"], train_games=len(games),
                train_games_sha256=hashlib.sha256("\n".join(games).encode()).hexdigest(), commands=list(commands),
                results={})
    for run in eval_runs:
        ((label, episodes),) = load_runs([run])
        stats = group_stats(card["rhythm"], label, episodes)
        card["results"][json.loads((run / "settings.json").read_text())["games"]] = {
            column: [stats.wins[column], stats.games[column]] for column in COLUMNS}
    dest = ADAPTERS_DIR / card["rhythm"]
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        shutil.copy(model_dir / name, dest / name)
    (dest / MODEL_CARD).write_text(json.dumps(card, indent=1) + "\n")
    (dest / "README.md").write_text(adapter_readme(card))
    return dest


def adapter_readme(card: dict) -> str:
    """A shipped adapter's card as Markdown: what it is, how it was made, what it scored."""
    from sparse_react.report import COLUMNS, markdown_table

    settings, base = card["settings"], card["base_identity"]
    rows = [[games, *(f"{w}/{n}" for w, n in (cells[c] for c in COLUMNS[:-1])),
             f"{cells['All'][0]}/{cells['All'][1]} ({cells['All'][0] / max(1, cells['All'][1]):.0%})"]
            for games, cells in card["results"].items()]
    minutes = card["seconds_this_run"] / 60
    return "\n\n".join([
        f"# The shipped {card['rhythm']} agent",
        f"A LoRA adapter (rank {settings['lora_rank']}, alpha {settings['lora_alpha'] or 2 * settings['lora_rank']}, "
        f"modules: {settings['lora_targets']}) on {base['file']} from {base.get('package', '')} "
        f"{base.get('version', '')} (sha256 `{base['sha256']}`), played zero-shot in the {card['rhythm']} rhythm. "
        f"`sparse-react eval --rhythms {card['rhythm']}` plays it; it is merged into the base at load.",
        "## Results (success is the game's `won`)",
        markdown_table(["set", *COLUMNS], rows),
        "## Training",
        f"{card['examples']} won `search-expert` episodes of {card['train_games']} distinct train games, none "
        f"from an evaluation set (data sha256 `{card['data_sha256']}`, {card['data_bytes']:,} bytes); "
        f"{card['steps']} optimizer steps of "
        f"{settings['batch_size'] * settings['grad_accum']} examples, learning rate {settings['learning_rate']}, "
        f"seed {settings['seed']}; loss on the agent's lines {card['first_loss']:.3f} → {card['last_loss']:.3f}; "
        f"{minutes:.0f} minutes here (2 CPU cores), peak memory {card['peak_rss_mb_this_run']:,} MB.",
        "The commands that made it and measured it:",
        "```bash\n" + "\n".join(card["commands"]) + "\n```",
    ]) + "\n"
