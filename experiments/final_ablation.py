"""The four-rhythm ablation of the shipped adapters under both budget rules.

Each shipped adapter plays each evaluation set twice: under the paper's rule (a thought spends one
of the 50 steps) and with a budget of 50 actions where thoughts are free (`eval --thoughts-free`).
Act never thinks, so its one run serves both rules. Every (rule, set, rhythm) is its own resumable run
folder under --out. When a run has finished, one line per episode (game, rhythm, won, lines, actions,
failure class, a contradicted "found" claim) goes to --records, which is committed: the tables can be
printed again, and the ablation finished in another sitting, on a machine that has lost `runs/`.
From the records it prints success per rhythm and rule, then game-by-game pairs: each rhythm across
the rules (what the budget changes) and every two rhythms under each rule (what thinking changes).

    python experiments/final_ablation.py [--sets valid_unseen,alfworld:valid_seen] [--rules steps,actions] [--rhythms im,dense] [--report-only]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from itertools import combinations
from pathlib import Path

from sparse_react.claims import contradicted_claims
from sparse_react.report import COLUMNS, PairedComparison, markdown_table, pairs_table
from sparse_react.steps import Steps
from sparse_react.tasks import TaskType
from sparse_react.trajectory import EPISODES_FILE, failure_class, read_episodes

RHYTHMS = ("sparse", "dense", "im", "act")
RULES = {"steps": [], "actions": ["--thoughts-free"]}  # rule name: the eval flags that make it
RECORDS = Path(__file__).parent / "results" / "final-ablation"
COLUMN = {t.value: t.column for t in TaskType}


def rhythms_under(rule: str) -> tuple[str, ...]:
    return RHYTHMS if rule == "steps" else tuple(r for r in RHYTHMS if r != "act")


def run_name(rule: str, games: str, rhythm: str) -> str:
    return f"{rule}-{games.replace(':', '-')}-{rhythm}"


def compact(run: Path, rule: str, games: str) -> list[dict]:
    """One small record per episode of a finished run."""
    return [{"rule": rule, "set": games, "rhythm": e.rhythm, "policy": e.policy, "game": e.game_name,
             "task_type": e.task_type, "won": e.won, "lines": len(e.entries), "actions": len(e.actions),
             "failure": None if e.won else getattr(failure_class(e), "value", None),
             "false_claim": not e.won and bool(contradicted_claims(e))}
            for e in read_episodes(run / EPISODES_FILE)]


def play(sets: list[str], rules: list[str], rhythms: list[str], out: Path, records: Path, extra: list[str]) -> None:
    """Play every (rule, set, rhythm) run not yet in the records, and record each when it has finished."""
    steps = Steps()
    for games in sets:
        for rule in rules:
            for rhythm in (r for r in rhythms if r in rhythms_under(rule)):
                name = run_name(rule, games, rhythm)
                run, record = out / name, records / f"{name}.jsonl"
                steps.run(["eval", "--games", games, "--rhythms", rhythm, *RULES[rule], *extra, "--out", str(run)],
                          done=record.is_file())  # eval itself resumes an unfinished run folder
                if not record.is_file():
                    record.parent.mkdir(parents=True, exist_ok=True)
                    record.write_text("".join(json.dumps(r) + "\n" for r in compact(run, rule, games)))


def load(records: Path) -> dict[tuple[str, str, str], dict[str, dict]]:
    """(rule, set, rhythm) → game → record; act's steps runs stand for its actions runs too."""
    table: dict[tuple[str, str, str], dict[str, dict]] = {}
    for path in sorted(records.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            table.setdefault((r["rule"], r["set"], r["rhythm"]), {})[r["game"]] = r
    for (rule, games, rhythm), played in list(table.items()):
        if rhythm not in rhythms_under("actions"):
            table.setdefault(("actions", games, rhythm), played)
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


def report(table: dict[tuple[str, str, str], dict[str, dict]]) -> str:
    """The tables, as Markdown: per set, success and losses per rhythm and rule, then the pairs."""
    sets = list(dict.fromkeys(k[1] for k in table))
    policies = sorted({r["policy"] for played in table.values() for r in played.values()})
    parts = ["# The four rhythms under both budget rules",
             f"Policy: {', '.join(policies)} (`hf`: each rhythm's shipped adapter). `steps`: a budget of steps, "
             "a thought spending one (the paper's rule, 50 steps); `actions`: as many actions, thoughts free "
             "(act's one run stands for both). Success is the game's `won`."]
    for games in sets:
        rows = []
        for rhythm in RHYTHMS:
            for rule in RULES:
                if played := table.get((rule, games, rhythm)):
                    rows.append([rhythm, rule, *success_and_losses(list(played.values()))])
        parts += [f"## {games}", markdown_table(
            ["rhythm", "rule", *COLUMNS[:-1], "All", "lines", "actions", "losses: cycle / budget", "false claims"], rows)]
        won = {(rule, rhythm): {g: r["won"] for g, r in played.items()}
               for (rule, s, rhythm), played in table.items() if s == games}
        groups = [(("steps", r), ("actions", r)) for r in rhythms_under("actions")]
        groups += [((rule, a), (rule, b)) for rule in RULES for a, b in combinations(RHYTHMS, 2)]
        pairs = [PairedComparison.of(" ".join(first[::-1]), " ".join(second[::-1]), won[first], won[second])
                 for first, second in groups if first in won and second in won]
        parts += ["Game by game: each rhythm across the rules (the budget), then every two rhythms under each rule "
                  "(thinking).", pairs_table([c for c in pairs if c.games])]
    return "\n\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="valid_unseen,alfworld:valid_seen")
    parser.add_argument("--rules", default="steps,actions", help="steps (the paper's rule), actions (thoughts free)")
    parser.add_argument("--rhythms", default=",".join(RHYTHMS), help="which to play, in this order")
    parser.add_argument("--out", type=Path, default=Path("runs/final-ablation"))
    parser.add_argument("--records", type=Path, default=RECORDS)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--dtype", default="float32",
                        help="float32 (default): a decision does not depend on which episodes share its batch, "
                             "as in bfloat16, so runs of different sittings compare")
    parser.add_argument("--max-steps", type=int, default=50, help="the budget (steps or actions)")
    parser.add_argument("--limit", type=int, default=None, help="the first N games of each set (a quick look)")
    parser.add_argument("--policy", default=None, help="another policy than the shipped adapters, e.g. expert")
    parser.add_argument("--report-only", action="store_true", help="print the tables from the records; play nothing")
    args = parser.parse_args()
    if not args.report_only:
        play(args.sets.split(","), args.rules.split(","), args.rhythms.split(","), args.out, args.records,
             ["--batch", str(args.batch), "--dtype", args.dtype, "--max-steps", str(args.max_steps),
              *(["--limit", str(args.limit)] if args.limit else []), *(["--policy", args.policy] if args.policy else [])])
    args.records.mkdir(parents=True, exist_ok=True)
    text = report(load(args.records))
    (args.records / "final-ablation.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
