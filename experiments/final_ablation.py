"""The four-rhythm ablation of the shipped adapters under both budget rules.

Each shipped adapter plays each evaluation set twice: under the paper's rule (a thought spends one
of the 50 steps) and with a budget of 50 actions where thoughts are free (`eval --thoughts-free`).
Act never thinks, so its one run serves both rules. Every (rule, set, rhythm) is its own resumable run
folder under --out. When a run has finished, one line per episode (game, rhythm, the sha256 of the
adapter's weights, won, lines, actions, failure class, a contradicted "found" claim) goes to
`--records/<key>/<rule>-<set>-<rhythm>.jsonl`, which is committed: the key is the first 12 hex digits
of that sha256 (a policy without weights, such as an expert, is keyed by its name), so the records of
every adapter ever measured sit side by side and none is overwritten when another ships. The tables
can be printed again, and the ablation finished in another sitting, on a machine that has lost `runs/`.
From the records of the chosen adapters (--adapters; default: those shipped now) it prints success
per adapter and rule, each row labelled by its rhythm and key, then game-by-game pairs: each adapter
across the rules (what the budget changes) and every two adapters under each rule (what thinking, or
training, changes).

    python experiments/final_ablation.py [--sets valid_unseen,alfworld:valid_seen] [--rules steps,actions] [--rhythms im,dense] [--report-only]
    python experiments/final_ablation.py --report-only --adapters 23e0ed015266,d3541c59b95f   # two sparse adapters
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from itertools import combinations
from pathlib import Path
from typing import Sequence

from ablation_tables import adapter_weights_sha256  # experiments/, the script's folder

from sparse_react.api import Results, evaluate_with
from sparse_react.bundled import ADAPTERS_DIR
from sparse_react.claims import contradicted_claims
from sparse_react.errors import UserError
from sparse_react.household.tasks import TaskType
from sparse_react.options import ModelOptions
from sparse_react.report import COLUMNS, PairedComparison, markdown_table, pairs_table
from sparse_react.training.cards import ADAPTER_CONFIG
from sparse_react.training.stages import Pipeline, Stage
from sparse_react.trajectory import EPISODES_FILE, Episode, failure_class, read_episodes

RHYTHMS = ("sparse", "dense", "im", "act")
RULES = {"steps": {}, "actions": {"thoughts_free": True}}  # rule name: the eval options that make it
RECORDS = Path(__file__).parent / "results"  # <key>/<rule>-<set>-<rhythm>.jsonl, a folder per adapter
TABLES = "final-ablation.md"  # the tables of the adapters shipped now, beside their records' folders
SHORT = 12  # hex digits of an adapter's sha256 that name its records' folder
COLUMN = {t.value: t.column for t in TaskType}


def rhythms_under(rule: str) -> tuple[str, ...]:
    return RHYTHMS if rule == "steps" else tuple(r for r in RHYTHMS if r != "act")


def run_name(rule: str, games: str, rhythm: str) -> str:
    return f"{rule}-{games.replace(':', '-')}-{rhythm}"


def adapter_sha256(episode: Episode) -> str | None:
    """The sha256 of the weights that played an episode, as its record's policy spec holds it (the
    shipped policy's spec holds one per rhythm); None for a policy without weights (an expert)."""
    spec = episode.policy_spec
    return spec.get("rhythms", {}).get(episode.rhythm, spec).get("weights_sha256")


def record_key(sha256: str | None, policy: str) -> str:
    """The folder of a run's records: the adapter's short hash, or the name of a policy without weights."""
    return sha256[:SHORT] if sha256 else re.sub(r"[^\w.-]+", "_", policy)


def planned_key(policy: str | None, rhythm: str) -> str | None:
    """The key of the records `--policy` (None: the shipped adapters) will leave for `rhythm`, known before
    it plays: the short hash of the adapter's weights, or the policy's name where it has none. None where
    only the played episodes can say (the base model, a model that is not an adapter, a served one)."""
    if policy is None or policy == "hf" or policy.startswith("hf:"):
        folder = ADAPTERS_DIR / rhythm if policy in (None, "hf") else Path(policy[3:]).expanduser()
        if not (folder / ADAPTER_CONFIG).is_file():
            if policy in (None, "hf"):
                raise UserError(f"no adapter ships for the {rhythm} rhythm in {ADAPTERS_DIR}")
            return None
        return record_key(adapter_weights_sha256(folder), "hf")
    return None if policy == "served" else record_key(None, policy)


def compact(run: Path, rule: str, games: str) -> list[dict]:
    """One small record per episode of a finished run, naming the adapter that played it by its sha256."""
    return [{"rule": rule, "set": games, "rhythm": e.rhythm, "policy": e.policy, "adapter": adapter_sha256(e),
             "game": e.game_name, "task_type": e.task_type, "won": e.won, "lines": len(e.entries),
             "actions": len(e.actions), "failure": None if e.won else getattr(failure_class(e), "value", None),
             "false_claim": not e.won and bool(contradicted_claims(e))}
            for e in read_episodes(run / EPISODES_FILE)]


def write_record(rows: list[dict], records: Path, name: str, planned: str | None) -> str:
    """Write a finished run's rows to `records/<key>/<name>.jsonl` and return the key; UserError if its
    episodes were played by more than one adapter, or by another than the one planned."""
    keys = {record_key(r["adapter"], r["policy"]) for r in rows}
    if len(keys) != 1 or (planned is not None and keys != {planned}):
        raise UserError(f"run {name} was played by {', '.join(sorted(keys)) or 'no episode'}"
                         + (f", not by {planned}" if planned else "") + ": its records would be keyed wrong")
    (key,) = keys
    record = records / key / f"{name}.jsonl"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return key


def eval_stage(games: str, rule: str, rhythm: str, run: Path, model: ModelOptions, **options) -> Stage:
    """One (rule, set, rhythm) run: `evaluate_with` (`sparse-react eval`) with the rule's options and `options`
    (batch, max_steps, limit)."""
    return Stage("eval", evaluate_with, options={"games": games, "rhythms": rhythm, **RULES[rule], **options,
                                                 "model": model, "out": run},
                 isolated=model.loads_model, summary=Results.table)


def play(sets: list[str], rules: list[str], rhythms: list[str], out: Path, records: Path, model: ModelOptions,
         options: dict, policy: str | None = None) -> list[str]:
    """Play every (rule, set, rhythm) run not yet in the records, and record each when it has finished
    under the key of the adapter that played it; return the keys, in the order of `rhythms`."""
    pipeline, keys = Pipeline(), {}
    planned = {rhythm: planned_key(policy, rhythm) for rhythm in rhythms}
    for games in sets:
        for rule in rules:
            for rhythm in (r for r in rhythms if r in rhythms_under(rule)):
                name = run_name(rule, games, rhythm)
                run, key = out / name, planned[rhythm]
                done = key is not None and (records / key / f"{name}.jsonl").is_file()
                pipeline.run(eval_stage(games, rule, rhythm, run, model, **options),
                             done=done)  # eval itself resumes an unfinished run folder
                if not done:
                    key = write_record(compact(run, rule, games), records, name, key)
                keys[rhythm] = key
    return [keys[r] for r in rhythms if r in keys]


Label = tuple[str, str]  # (rhythm, key): a row of the tables, one adapter playing one rhythm


def label(row: Label) -> str:
    return " ".join(row)


def load(records: Path, keys: Sequence[str]) -> dict[tuple[str, str, Label], dict[str, dict]]:
    """(rule, set, (rhythm, key)) → game → record, from `records/<key>/` for each of `keys`; act's
    steps runs stand for its actions runs too. UserError naming a key that has no records."""
    table: dict[tuple[str, str, Label], dict[str, dict]] = {}
    for key in keys:
        paths = sorted((records / key).glob("*.jsonl"))
        if not paths:
            there = sorted(p.name for p in records.iterdir() if p.is_dir()) if records.is_dir() else []
            raise UserError(f"no records for {key} in {records} (there: {', '.join(there) or 'none'})")
        for path in paths:
            for line in path.read_text().splitlines():
                r = json.loads(line)
                table.setdefault((r["rule"], r["set"], (r["rhythm"], key)), {})[r["game"]] = r
    for (rule, games, row), played in list(table.items()):
        if row[0] not in rhythms_under("actions"):
            table.setdefault(("actions", games, row), played)
    return table


def success_and_losses(played: list[dict]) -> list[str]:
    """One table row's cells from a run's records: wins per task type and in all, lines, actions, losses."""
    won, n = Counter(), Counter()
    for r in played:
        n[COLUMN[r["task_type"]]] += 1
        won[COLUMN[r["task_type"]]] += r["won"]
    lost = [r for r in played if not r["won"]]
    failures = Counter(r["failure"] for r in lost)
    return [*(f"{won[c]}/{n[c]}" for c in COLUMNS[:-1]),
            f"**{sum(won.values())}/{len(played)} ({sum(won.values()) / len(played):.0%})**",
            str(sum(r["lines"] for r in played)), str(sum(r["actions"] for r in played)),
            " / ".join(str(failures[f]) for f in ("cycle", "budget")) + f" of {len(lost)}",
            str(sum(r["false_claim"] for r in lost))]


def report(table: dict[tuple[str, str, Label], dict[str, dict]], shipped: Sequence[str] = ()) -> str:
    """The tables, as Markdown: per set, success and losses per adapter (rhythm and key) and rule, then the
    pairs. `shipped`: the keys of the adapters shipped now, which the text names."""
    sets = list(dict.fromkeys(k[1] for k in table))
    order = sorted({k[2] for k in table}, key=lambda row: (RHYTHMS.index(row[0]), row[1]))
    policies = sorted({r["policy"] for played in table.values() for r in played.values()})
    now = [label(row) for row in order if row[1] in shipped]
    parts = ["# The four rhythms under both budget rules",
             f"Policy: {', '.join(policies)}. Each row is one adapter playing its rhythm, named by the rhythm and "
             f"the first {SHORT} hex digits of the sha256 of its weights (a policy without weights by its name): "
             "its records' folder in experiments/results/"
             + (f"; shipped now: {', '.join(now)}" if now else "") + ". `steps`: a budget of steps, "
             "a thought spending one (the paper's rule, 50 steps); `actions`: as many actions, thoughts free "
             "(act's one run stands for both). Success is the game's `won`."]
    for games in sets:
        rows = []
        for row in order:
            for rule in RULES:
                if played := table.get((rule, games, row)):
                    rows.append([label(row), rule, *success_and_losses(list(played.values()))])
        parts += [f"## {games}", markdown_table(
            ["adapter", "rule", *COLUMNS[:-1], "All", "lines", "actions", "losses: cycle / budget", "false claims"],
            rows)]
        won = {(rule, row): {g: r["won"] for g, r in played.items()}
               for (rule, s, row), played in table.items() if s == games}
        groups = [(("steps", row), ("actions", row)) for row in order if row[0] in rhythms_under("actions")]
        groups += [((rule, a), (rule, b)) for rule in RULES for a, b in combinations(order, 2)]
        pairs = [PairedComparison.of(f"{label(first[1])} {first[0]}", f"{label(second[1])} {second[0]}",
                                     won[first], won[second])
                 for first, second in groups if first in won and second in won]
        parts += ["Game by game: each adapter across the rules (the budget), then every two adapters under each rule "
                  "(thinking).", pairs_table([c for c in pairs if c.games])]
    return "\n\n".join(parts) + "\n"


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="valid_unseen,alfworld:valid_seen")
    parser.add_argument("--rules", default="steps,actions", help="steps (the paper's rule), actions (thoughts free)")
    parser.add_argument("--rhythms", default=",".join(RHYTHMS), help="which to play, in this order")
    parser.add_argument("--out", type=Path, default=Path("runs/final-ablation"))
    parser.add_argument("--records", type=Path, default=RECORDS,
                        help="the folder of the records, one folder in it per adapter (its short hash)")
    parser.add_argument("--adapters", default=None, metavar="KEY,...",
                        help="whose records the tables show: folders of --records (short hashes; default: the "
                             "adapters --policy plays, the shipped ones unless it is given)")
    parser.add_argument("--tables", type=Path, default=None,
                        help=f"where the tables go too (default: --records/{TABLES} for the default adapters; "
                             "none for others)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--dtype", default="float32",
                        help="float32 (default): a decision does not depend on which episodes share its batch, "
                             "as in bfloat16, so runs of different sittings compare")
    parser.add_argument("--max-steps", type=int, default=50, help="the budget (steps or actions)")
    parser.add_argument("--limit", type=int, default=None, help="the first N games of each set (a quick look)")
    parser.add_argument("--policy", default=None, help="another policy than the shipped adapters, e.g. expert")
    parser.add_argument("--report-only", action="store_true", help="print the tables from the records; play nothing")
    return parser


def model_and_options(args: argparse.Namespace) -> tuple[ModelOptions, dict]:
    """Who plays (--policy, --dtype) and the eval options every run shares."""
    model = ModelOptions(policy=args.policy or "hf", dtype=args.dtype)
    return model, {"batch": args.batch, "max_steps": args.max_steps, **({"limit": args.limit} if args.limit else {})}


def main() -> None:
    parser = arguments()
    args = parser.parse_args()
    played = [] if args.report_only else play(
        args.sets.split(","), args.rules.split(","), args.rhythms.split(","), args.out, args.records,
        *model_and_options(args), args.policy)
    if args.adapters:
        chosen = list(dict.fromkeys(args.adapters.split(",")))
    else:  # what was just played, and every rhythm's records of the same policy that are there
        planned = (planned_key(args.policy, r) for r in RHYTHMS)
        chosen = [k for k in dict.fromkeys([*played, *filter(None, planned)]) if (args.records / k).is_dir()]
        if not chosen:
            parser.error(f"no records of {args.policy or 'the shipped adapters'} in {args.records}: "
                         "play them, or name records with --adapters")
    try:
        text = report(load(args.records, chosen), [planned_key(None, r) for r in RHYTHMS])
    except UserError as exc:
        parser.error(str(exc))
    tables = args.tables or (args.records / TABLES if not args.adapters else None)
    if tables:
        tables.parent.mkdir(parents=True, exist_ok=True)
        tables.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
