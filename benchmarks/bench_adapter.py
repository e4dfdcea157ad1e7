"""What a shipped adapter costs per turn: the untuned base, the adapter merged into it at load (what
`--policy hf` plays) and the adapter left unmerged (peft's LoRA layers run beside every linear layer),
timed on the same work in one run.

The work is fixed whatever a model would choose: `search-expert` episodes of bundled valid_unseen
games are replayed line by line, and at each action turn the model encodes the new text and scores
picks among the admissible commands after it (its KV cache kept across turns, as in play). The three models are
loaded and warmed up, then take turns episode by episode.

    HF_HUB_OFFLINE=1 python benchmarks/bench_adapter.py [--rhythm sparse] [--games 6] [--threads 2] [--also DIR ...]

`--also` adds model folders (a full fine-tune, say) as further arms on the same work.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def replay(policy, episodes) -> tuple[int, float]:
    """Turns scored and seconds spent on them, over every episode's action turns. The context is
    in the act rhythm, so every turn scores the admissible commands and none generates a thought."""
    from sparse_react.agent import Context
    from sparse_react.household.env import HouseholdEnv, ThinkWrapper
    from sparse_react.lines import Kind, thought_line
    from sparse_react.rhythms import get_rhythm

    turns, seconds = 0, 0.0
    for game, episode in episodes:
        env = ThinkWrapper(HouseholdEnv([game]))
        observation, info = env.reset(options={"game": game})
        context = Context.start(get_rhythm("act"), game.task_type, info["task"], observation, game=game)
        policy.start(context)
        for entry in episode.entries:
            if entry.kind is Kind.ACTION:
                started = time.perf_counter()
                policy.decide([(context, info["admissible_commands"])])
                seconds += time.perf_counter() - started
                turns += 1
            line = thought_line(entry.text) if entry.kind is Kind.THOUGHT else entry.text
            observation, _, _, _, info = env.step(line)
            context.append(line, observation)
        policy.end(context)
    return turns, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rhythm", default="sparse")
    parser.add_argument("--games", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--also", nargs="*", default=[], help="model folders or .gguf files timed as further arms")
    parser.add_argument("--action-mode", default="scored", help="how every arm picks a command (the shipped "
                        "adapters play scored)")
    args = parser.parse_args()

    import torch

    from sparse_react.evaluation import evaluate
    from sparse_react.household.catalog import find_games
    from sparse_react.models.loading import load_model
    from sparse_react.policies.expert import SearchingExpertPolicy
    from sparse_react.policies.hf import HFPolicy
    from sparse_react.policies.shipped import shipped_adapter

    torch.set_num_threads(args.threads)
    games = find_games("valid_unseen")[::20][:args.games]
    played = evaluate(games, SearchingExpertPolicy(), args.rhythm, progress=False)
    episodes = list(zip(games, played))
    adapter = shipped_adapter(args.rhythm)
    arms = {"base": lambda: load_model(None, "cpu"), "merged adapter": lambda: load_model(adapter, "cpu"),
            "unmerged adapter": lambda: load_model(adapter, "cpu", merge=False),
            **{folder: (lambda folder=folder: load_model(folder, "cpu")) for folder in args.also}}
    loads, policies = {}, {}
    for name, load in arms.items():
        started = time.perf_counter()
        loaded = load()
        loads[name] = time.perf_counter() - started
        policies[name] = HFPolicy(loaded=loaded, shots=0, action_mode=args.action_mode)
        replay(policies[name], episodes[:1])  # warm-up
    totals = {name: [0, 0.0] for name in arms}
    for episode in episodes:  # the arms take turns, episode by episode, so drift hits them alike
        for name, policy in policies.items():
            turns, seconds = replay(policy, [episode])
            totals[name][0] += turns
            totals[name][1] += seconds
    results = {name: (loads[name], turns / seconds, str(policies[name].model.dtype).replace("torch.", ""))
               for name, (turns, seconds) in totals.items()}
    print(f"{len(episodes)} search-expert episodes of bundled valid_unseen replayed in the {args.rhythm} rhythm; "
          f"each action turn picks among the admissible commands ({args.action_mode}, {args.threads} threads)\n")
    print("| model | dtype | load (s) | turns/s | time per turn vs base |")
    print("|---|---|---|---|---|")
    base = results["base"][1]
    for name, (load_s, rate, dtype) in results.items():
        print(f"| {name} | {dtype} | {load_s:.1f} | {rate:.2f} | {base / rate:.3f}x |")


if __name__ == "__main__":
    main()
