"""The rhythm ablation side by side: one fine-tuned model per rhythm, each evaluated on the same sets.

Reads a folder laid out by `experiments/ablation.py`: `model-RHYTHM/sparse_react.json` (the card
`sparse-react finetune` writes) and `eval-RHYTHM-SET/` run folders. Every number comes from those
files; success is the game's `won`.

Also `ship_adapter`, which `experiments/ablation.py --ship` and `experiments/ship_round.py` use to
copy a trained adapter into the package's `sparse_react/adapters/<rhythm>/` (replacing what is
there) with its card and README. This is experiment code of the source checkout, not part of the
installed package: the scripts and tests beside it put `experiments/` on `sys.path` to import it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Sequence

from sparse_react.bundled import ADAPTERS_DIR
from sparse_react.evaluation import SETTINGS_FILE
from sparse_react.policies.expert import RelabellingExpertPolicy
from sparse_react.report import (
    COLUMNS,
    DASH,
    GroupStats,
    PairedComparison,
    format_number,
    group_stats,
    load_runs,
    markdown_table,
    pairs_table,
    success_rows,
)
from sparse_react.training.cards import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    DEFAULT_ACTION_MODE,
    MODEL_CARD,
    ModelError,
    training_seconds,
)
from sparse_react.trajectory import RecordError

RHYTHM_ORDER: tuple[str, ...] = ("sparse", "dense", "im", "act")
# Where the shipped adapters were trained (their READMEs' training minutes): the machine of these
# experiments, not a property of the package; ship_adapter's `machine` overrides it.
TRAINED_ON = "2 CPU cores"
# Yao et al. (ICLR 2023), Table 3: PaLM-540B prompted (best prompt set), ALFWorld's 134 unseen games.
PAPER_UNSEEN = {"ReAct (sparse)": 71, "ReAct-IM (im)": 53, "Act (act)": 45}


@dataclass(frozen=True)
class TrainedModel:
    """What a model's card says about its training."""

    rhythm: str
    examples: int
    steps: int
    first_loss: float | None  # None when training ended before the first logged step
    last_loss: float | None
    max_thought_tokens: int | None  # the card's cap: longest training thought + a margin


@dataclass
class Ablation:
    """The models found and, per evaluation set (as `sparse-react eval --games` named it), one row per rhythm."""

    root: Path
    models: dict[str, TrainedModel]
    sets: dict[str, list[GroupStats]]
    won: dict[str, dict[str, dict[tuple[str, int], bool]]]  # set → rhythm → (game, prompt variant) → won


def _rhythm_key(rhythm: str) -> tuple[int, str]:
    return (RHYTHM_ORDER.index(rhythm) if rhythm in RHYTHM_ORDER else len(RHYTHM_ORDER), rhythm)


def eval_runs(root: Path | str) -> list[Path]:
    """The evaluation run folders under root (`eval-*` holding a settings.json), by name."""
    return sorted(p for p in Path(root).glob("eval-*") if (p / SETTINGS_FILE).is_file())


def load_ablation(root: Path | str) -> Ablation:
    """Read every model card and evaluation run under root. Raises RecordError naming root when it holds no runs."""
    root = Path(root)
    models = {}
    for card_path in sorted(root.glob(f"model-*/{MODEL_CARD}")):
        card = json.loads(card_path.read_text())
        models[card["rhythm"]] = TrainedModel(card["rhythm"], card["examples"], card["steps"], card["first_loss"],
                                              card["last_loss"], card.get("max_thought_tokens"))
    sets: dict[str, list[GroupStats]] = {}
    won: dict[str, dict[str, dict[tuple[str, int], bool]]] = {}
    for run_dir in eval_runs(root):
        games = json.loads((run_dir / SETTINGS_FILE).read_text())["games"]
        ((label, episodes),) = load_runs([run_dir])
        for rhythm in dict.fromkeys(e.rhythm for e in episodes):
            mine = [e for e in episodes if e.rhythm == rhythm]
            sets.setdefault(games, []).append(group_stats(rhythm, label, mine))
            won.setdefault(games, {})[rhythm] = {(e.game_name, e.prompt_variant): e.won for e in mine}
    if not sets:
        raise RecordError(f"{root}: no eval-RHYTHM-SET run folders (experiments/ablation.py writes them)")
    for groups in sets.values():
        groups.sort(key=lambda g: _rhythm_key(g.rhythm))
    return Ablation(root, dict(sorted(models.items(), key=lambda kv: _rhythm_key(kv[0]))), sets, won)


def paired(ablation: Ablation, games: str) -> list[PairedComparison]:
    """Every pair of rhythms evaluated on `games`, compared game by game on the games both played."""
    by_rhythm = ablation.won[games]
    pairs = []
    for a, b in combinations(sorted(by_rhythm, key=_rhythm_key), 2):
        pairs.append(PairedComparison.of(a, b, by_rhythm[a], by_rhythm[b]))
    return pairs


def order(groups: list[GroupStats]) -> str:
    """The rhythms by overall success, best first: `sparse 75% > act 60% = im 60%`."""
    ranked = sorted(groups, key=lambda g: -(g.success("All") or 0.0))
    text = f"{ranked[0].rhythm} {ranked[0].success('All'):.0f}%"
    for before, g in zip(ranked, ranked[1:]):
        text += (" = " if g.success("All") == before.success("All") else " > ") + f"{g.rhythm} {g.success('All'):.0f}%"
    return text


def ablation_markdown(ablation: Ablation) -> str:
    """Training, then per evaluation set the success table with thoughts and tokens per episode, then the order."""
    parts = ["# Rhythm ablation", f"From `{ablation.root}`. Success is what the game said (`won`)."]
    if ablation.models:
        rows = [[m.rhythm, str(m.examples), str(m.steps),
                 f"{format_number(m.first_loss, 3)} → {format_number(m.last_loss, 3)}",
                 DASH if m.rhythm == "act" else str(m.max_thought_tokens or DASH)] for m in ablation.models.values()]
        parts += ["## Training", markdown_table(["rhythm", "examples", "steps", "loss", "thought cap (tokens)"], rows),
                  "Loss: the first and last logged values (agent lines only). Thought cap: the longest training "
                  "thought plus a margin, the most the policy lets the model write."]
    for games, groups in ablation.sets.items():
        rows = [[*cells, format_number(g.thoughts_per_episode, 1), format_number(g.tokens_per_episode, 0),
                 format_number(g.mean_steps_won, 1), str(g.failures["budget"])]
                for g, cells in zip(groups, success_rows(groups))]
        header = ["rhythm", *COLUMNS, "thoughts/ep", "tokens/ep", "steps to success", "out of steps"]
        parts += [f"## {games}", markdown_table(header, rows), f"Order: {order(groups)}."]
        most = max(g.episodes for g in groups)
        parts += [f"Not finished: {g.rhythm} has played {g.episodes} of the {most} episodes; its row and pairs are "
                  f"not comparable yet (rerun its evaluation to resume)." for g in groups if g.episodes < most]
        if len(groups) > 1:
            parts.append(pairs_table(paired(ablation, games)))
    parts.append("Tokens/ep: tokens the model ran through per episode (each new turn's text, scored candidates and "
                 "generated lines; the cached history counted once). Steps to success: entries (thoughts and actions) "
                 "of won episodes. Out of steps: episodes that used the whole budget (thoughts count as steps). Pairs: "
                 "the same games played by two rhythms; p is the chance of a split at least this uneven of the games "
                 "only one of them won if neither rhythm were better (two-sided).")
    paper = " > ".join(f"{r} {p}%" for r, p in PAPER_UNSEEN.items())
    parts.append(f"The paper's order (PaLM-540B prompted, ALFWorld unseen): {paper}.")
    return "\n\n".join(parts) + "\n"


def write_ablation_report(root: Path | str, out: Path | str | None = None) -> Path:
    """Write ablation.md (default: into root) and return its path."""
    path = Path(out) if out else Path(root) / "ablation.md"
    path.write_text(ablation_markdown(load_ablation(root)))
    return path


def ship_adapter(model_dir: Path, commands: Sequence[str], eval_runs: Sequence[Path],
                 dest_root: Path = ADAPTERS_DIR, machine: str = TRAINED_ON) -> Path:
    """Copy a trained adapter into the package (`dest_root`) as its rhythm's shipped agent, with a card
    that adds the commands that made it, where its training data came from and the results measured
    with it (from the evaluation runs' records). An adapter trained on from another (`finetune
    --init-adapter`) carries a summary of that one's training too. `machine` says in the README where
    the training's minutes were measured ("" says nothing)."""
    card = json.loads((model_dir / MODEL_CARD).read_text())
    if card.get("kind") != "lora":
        raise ModelError(f"{model_dir} is not a LoRA adapter (its card says kind {card.get('kind')!r})")
    games = card.pop("train_games")
    parent = json.loads((Path(start) / MODEL_CARD).read_text()) if (start := card["settings"].get("init_adapter")) else {}
    card.update(base=card["base_identity"]["file"], train_games=len(games),
                train_games_sha256=hashlib.sha256("\n".join(games).encode()).hexdigest(),
                data_sources=_data_sources(Path(card["data"])),
                commands=list(commands),
                results={})
    if parent:
        card["continued_from"] = {k: parent.get(k) for k in (
            "examples", "data_sha256", "steps", "first_loss", "last_loss", "seconds_this_run", "peak_rss_mb_this_run")}
    for run in eval_runs:
        ((label, episodes),) = load_runs([run])
        stats = group_stats(card["rhythm"], label, episodes)
        card["results"][json.loads((run / SETTINGS_FILE).read_text())["games"]] = {
            column: [stats.wins[column], stats.games[column]] for column in COLUMNS}
    dest = dest_root / card["rhythm"]
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        shutil.copy(model_dir / name, dest / name)
    (dest / MODEL_CARD).write_text(json.dumps(card, indent=1) + "\n")
    (dest / "README.md").write_text(adapter_readme(card, machine))
    return dest


def adapter_weights_sha256(folder: Path) -> str:
    """The sha256 of an adapter's weights as the package computes it, the hash its episode records carry
    and the final ablation's records are keyed by (`experiments/results/<first 12 hex digits>/`)."""
    from sparse_react.models.loading import weights_sha256

    return weights_sha256(folder)


def shipped_line(dest: Path) -> str:
    """What shipping an adapter prints: where it went and the hash that names its records from now on."""
    sha256 = adapter_weights_sha256(dest)
    return (f"shipped: {dest} (weights sha256 {sha256}; "
            f"its final-ablation records: experiments/results/{sha256[:12]}/)")


def _data_sources(data: Path) -> dict[str, int]:
    """Training examples per policy that played them (`search-expert`, a model's own won episodes, ...)."""
    try:
        return dict(Counter(json.loads(line).get("policy", "?") for line in data.read_text().splitlines()))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"training data {data} (named by the adapter's card) is not readable: {exc}") from None


AGENT_LINES = "on the agent's lines"


def adapter_readme(card: dict, machine: str = TRAINED_ON) -> str:
    """A shipped adapter's card as Markdown: what it is, how it was made, what it scored (its training's
    minutes said to be measured on `machine`, where that is not "")."""
    settings, base = card["settings"], card["base_identity"]
    rows = [[games, *(f"{w}/{n}" for w, n in (cells[c] for c in COLUMNS[:-1])),
             f"{cells['All'][0]}/{cells['All'][1]} ({cells['All'][0] / max(1, cells['All'][1]):.0%})"]
            for games, cells in card["results"].items()]
    counts = card.get("data_sources", {"search-expert": card["examples"]})
    if RelabellingExpertPolicy.name in counts:  # not all whole episodes: say what each source's examples are
        data = f"{card['examples']} training examples (" + "; ".join(
            f"{n} of `{policy}`, " + ("states of the model's own play, each with the label that corrects it"
                                       if policy == RelabellingExpertPolicy.name else "won episodes")
            for policy, n in counts.items()) + ")"
    else:
        data = f"{card['examples']} won episodes (" + ", ".join(f"{n} of `{p}`" for p, n in counts.items()) + ")"
    return "\n\n".join([
        f"# The shipped {card['rhythm']} agent",
        f"A LoRA adapter (rank {settings['lora_rank']}, alpha {settings['lora_alpha'] or 2 * settings['lora_rank']}, "
        f"modules: {settings['lora_targets']}) on {base['file']} from {base.get('package', '')} "
        f"{base.get('version', '')} (sha256 `{base['sha256']}`), played zero-shot in the {card['rhythm']} rhythm, "
        f"choosing its commands in the `{card.get('action_mode', DEFAULT_ACTION_MODE)}` action mode. "
        f"`sparse-react eval --rhythms {card['rhythm']}` plays it; it is merged into the base at load.",
        "## Results (success is the game's `won`)",
        markdown_table(["set", *COLUMNS], rows),
        "## Training",
        f"{data} of {card['train_games']} distinct train games, none "
        f"from an evaluation set (data sha256 `{card['data_sha256']}`, {card['data_bytes']:,} bytes); "
        f"{_continued(card.get('continued_from'))}{card['steps']} optimizer steps of "
        f"{settings['batch_size'] * settings['grad_accum']} examples, learning rate {settings['learning_rate']}, "
        f"seed {settings['seed']}; {'; '.join(_facts(card, AGENT_LINES, f' here ({machine})' if machine else ''))}.",
        "The commands that made it and measured it:",
        "```bash\n" + "\n".join(card["commands"]) + "\n```",
    ]) + "\n"


def _continued(parent: dict | None) -> str:
    if not parent:
        return ""
    return (f"training on from an adapter trained {parent['steps']} optimizer steps on {parent['examples']} episodes "
            f"(data sha256 `{parent['data_sha256'][:12]}…`{''.join('; ' + fact for fact in _facts(parent))}), ")


def _facts(card: dict, whose: str = "", where: str = "") -> list[str]:
    """Loss, time and memory of a training, where its card has them (short runs log no loss)."""
    first, last, peak = (card.get(k) for k in ("first_loss", "last_loss", "peak_rss_mb_this_run"))
    seconds, resumed = training_seconds(card), card.get("resumed_from")
    sitting = ""
    if resumed:  # a card from before checkpoints recorded their time has only the last sitting's
        sitting = (f" over sittings (resumed from {resumed})" if card.get("seconds")
                   else f" in the sitting that resumed from {resumed}")
    return [*([f"loss {whose + ' ' if whose else ''}{first:.3f} → {last:.3f}"]
              if first is not None and last is not None else []),
            *([f"{seconds / 60:.0f} minutes{where}{sitting}"] if seconds else []),
            *([f"peak memory {peak:,} MB"] if peak else [])]
