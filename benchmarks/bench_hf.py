"""The Hugging Face backend: KV cache kept across turns versus the naive loop that re-encodes the
whole prompt every turn, and scored versus free actions, on the same episode of a bundled game.

The model is loaded once (its load time is printed) and shared; loop detection is off so every
run plays the full `--steps` turns. Decisions with and without the cache must be identical.

    HF_HUB_OFFLINE=1 python benchmarks/bench_hf.py [--model PATH] [--steps 30] [--rhythm act] [--game 0] [--threads N] [--dtype float32]

On a busy small CPU, `--threads 1` can be much faster: one-token steps spend their time in
OpenMP barriers when the cores are shared with other processes.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def play(env, game, loaded, rhythm: str, steps: int, **settings) -> dict:
    from sparse_react.agent import LoopRules, run_episode
    from sparse_react.policies.hf import HFPolicy

    policy = HFPolicy(loaded=loaded, **settings)
    episode = run_episode(env, policy, game, rhythm, rules=LoopRules(max_steps=steps, loop_repeats=0))
    times = [e.wall_time for e in episode.entries]
    return {"lines": [(e.kind.value, e.text) for e in episode.entries], "error": episode.error,
            "won": episode.won, "turns": len(times), "mean_turn": statistics.fmean(times),
            "later_turn": statistics.fmean(times[1:]) if len(times) > 1 else times[0],
            "tokens": sum(e.tokens or 0 for e in episode.entries), **policy.stats,
            "invalid_rate": policy.invalid_rate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a model folder or .gguf (default: bundled SmolLM2-135M)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rhythm", default="act")
    parser.add_argument("--game", type=int, default=0, help="index among the bundled valid_unseen games")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float32", help="weights: float32 (as in the README table) or bfloat16")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from sparse_react.household.catalog import find_games
    from sparse_react.household.env import HouseholdEnv
    from sparse_react.models.loading import load_model

    games = find_games("valid_unseen")
    env, game = HouseholdEnv(games), games[args.game]
    started = time.perf_counter()
    loaded = load_model(args.model, device=args.device, dtype=args.dtype)
    print(f"model {loaded.source} on {loaded.device}: loaded in {time.perf_counter() - started:.1f} s")
    print(f"game {game.name}, rhythm {args.rhythm}, {args.steps} steps, torch threads {torch.get_num_threads()}")

    runs = {
        "scored, cache kept": {"reuse_cache": True},
        "scored, naive": {"reuse_cache": False},
        "free, cache kept": {"reuse_cache": True, "action_mode": "free"},
    }
    results = {}
    for label, settings in runs.items():
        results[label] = play(env, game, loaded, args.rhythm, args.steps, **settings)
        r = results[label]
        print(f"{label:20s} turns {r['turns']:3d}  s/turn {r['mean_turn']:6.2f} (after the 1st: {r['later_turn']:6.2f})"
              f"  tokens/episode {r['tokens']:7d} (encoded {r['tokens_encoded']}, generated {r['tokens_generated']})"
              f"  forward calls {r['forward_calls']}  re-encodes {r['full_reencodes']}"
              f"  invalid {r['invalid_rate']:.0%}  won {r['won']}" + (f"  ERROR {r['error']}" if r["error"] else ""))

    kept, naive = results["scored, cache kept"], results["scored, naive"]
    print(f"naive / cache kept: tokens {naive['tokens'] / kept['tokens']:.1f}x, "
          f"time per turn {naive['mean_turn'] / kept['mean_turn']:.1f}x "
          f"(after the 1st turn {naive['later_turn'] / kept['later_turn']:.1f}x)")
    print("identical decisions:", kept["lines"] == naive["lines"])
    free = results["free, cache kept"]
    print(f"free / scored time per turn: {free['mean_turn'] / kept['mean_turn']:.2f}x; "
          f"free actions not admissible: {free['invalid_rate']:.0%}")
    print(f"peak memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB RSS"
          + (f", {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB CUDA" if torch.cuda.is_available() else ""))
    print("scored actions:", "; ".join(text for kind, text in kept["lines"] if kind == "action")[:400])
    print("free actions:  ", "; ".join(text for kind, text in free["lines"] if kind == "action")[:400])


if __name__ == "__main__":
    main()
