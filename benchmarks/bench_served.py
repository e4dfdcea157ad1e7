"""A served model against the local batched policy, in one run: the embedded SmolLM2-135M-Instruct
plays the same bundled games in the same rhythm and action mode, in process (`HFPolicy`, episodes
decided together in batched passes) and behind a server on loopback with 1, 4 and 16 episodes in flight.

`--server llama-cpp` serves the GGUF file with llama.cpp (llama-cpp-python's server), `transformers`
with `transformers serve`; either is started here, on this machine's cores beside the client, and
stopped at the end. Free mode by default: neither server returns usable prompt log-probabilities
(`sparse_react.policies.served`). The table gives episodes a minute, turns a second, the time per turn
against the first arm, requests and prompt tokens per turn, and the share of prompt tokens the
server found in its prefix cache (from usage's cached tokens, or llama.cpp's own log lines).

    HF_HUB_OFFLINE=1 python benchmarks/bench_served.py [--server llama-cpp] [--limit 8] [--max-steps 10] [--arms local,1,4,16]
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(kind: str, gguf: Path, port: int, log: Path) -> tuple[subprocess.Popen, str]:
    """The server process and the model name it serves the embedded GGUF under."""
    if kind == "llama-cpp":
        name = "smollm2"
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", name,
                   "--n_ctx", "8192", "--host", "127.0.0.1", "--port", str(port)]
    else:
        name = f"{gguf.parent}:{gguf.name}"
        command = [str(Path(sys.executable).parent / "transformers"), "serve", name, "--host", "127.0.0.1",
                   "--port", str(port), "--device", "cpu"]
    process = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    for _ in range(600):
        if process.poll() is not None:
            raise SystemExit(f"the server exited ({process.returncode}); see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                return process, name
        except httpx.HTTPError:
            time.sleep(0.5)
    raise SystemExit(f"the server did not answer in 5 minutes; see {log}")


def llama_cpp_cache_hits(log: Path, start: int) -> int:
    """Prompt tokens llama.cpp found in its cache since byte `start` of its log ("N prefix-match hit")."""
    with log.open("rb") as handle:
        handle.seek(start)
        text = handle.read().decode(errors="ignore")
    return sum(int(n) for n in re.findall(r"(\d+) prefix-match hit", text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="llama-cpp", choices=("llama-cpp", "transformers"))
    parser.add_argument("--mode", default="free", choices=("scored", "free"))
    parser.add_argument("--rhythm", default="sparse")
    parser.add_argument("--games", default="valid_unseen")
    parser.add_argument("--limit", type=int, default=8, help="games, spread evenly over the set")
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--arms", default="local,1,4,16", help="local and/or episodes in flight on the server")
    parser.add_argument("--log", type=Path, default=Path("runs/bench_served_server.log"))
    args = parser.parse_args()

    from sparse_react.agent import LoopRules
    from sparse_react.evaluation import evaluate
    from sparse_react.household.catalog import find_games
    from sparse_react.models.loading import default_model_path
    from sparse_react.policies.hf import HFPolicy
    from sparse_react.policies.served import ServedPolicy

    every = find_games(args.games)
    games = every[:: max(1, len(every) // args.limit)][: args.limit]
    rules = LoopRules(max_steps=args.max_steps)
    gguf = default_model_path()
    args.log.parent.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server, name = start_server(args.server, gguf, port, args.log)
    rows = []
    try:
        for arm in args.arms.split(","):
            if arm == "local":
                policy = HFPolicy(action_mode=args.mode, shots=2)
                batch = 16
            else:
                policy = ServedPolicy(f"http://127.0.0.1:{port}", name, action_mode=args.mode, tokenizer="base", shots=2)
                batch = int(arm)
            log_start = args.log.stat().st_size
            started = time.perf_counter()
            episodes = evaluate(games, policy, args.rhythm, rules=rules, progress=False, batch=batch)
            seconds = time.perf_counter() - started
            turns = sum(len(e.entries) for e in episodes)
            stats = getattr(policy, "stats", {})
            cached = stats.get("cached_tokens", 0) or llama_cpp_cache_hits(args.log, log_start)
            rows.append((f"local, batch {batch}" if arm == "local" else f"served, {batch} in flight",
                         sum(e.won for e in episodes), len(episodes), turns, seconds,
                         stats.get("requests"), stats.get("prompt_tokens"), cached,
                         sum(e.error is not None for e in episodes)))
    finally:
        server.kill()
    print(f"{gguf.name} on {args.server}, {args.mode}, {args.rhythm} rhythm, {len(games)} games of {args.games}, "
          f"budget {args.max_steps}, 2-shot\n")
    print("| arm | won | turns | seconds | episodes/min | turns/s | time per turn vs first | requests per turn | "
          "prompt tokens per turn | prefix cache hits | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    first = rows[0][4] / max(1, rows[0][3])
    for arm, won, n, turns, seconds, requests, prompt, cached, errors in rows:
        per_turn = f"{requests / turns:.1f}" if requests is not None else "–"
        tokens = f"{prompt / turns:,.0f}" if prompt else "–"
        hits = f"{cached / prompt:.0%}" if prompt and cached else ("not reported" if requests is not None else "–")
        print(f"| {arm} | {won}/{n} | {turns} | {seconds:.0f} | {n / seconds * 60:.1f} | {turns / seconds:.2f} | "
              f"{seconds / max(1, turns) / first:.2f}x | {per_turn} | {tokens} | {hits} | {errors} |")


if __name__ == "__main__":
    main()
