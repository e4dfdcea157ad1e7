"""How the local engine writes: a line to its end (greedy or sampled, drafted several tokens a pass
where its earlier lines say how it goes on), or one of given candidates token by token."""

from __future__ import annotations

from typing import Any, Callable

import torch

from sparse_react.models.batch import Batch, Runner

DRAFT_KEY, DRAFT_LENGTH = 3, 8  # lines already written, looked up by 3 tokens, propose up to 8 next ones
Keep = Callable[[Batch, int, list[int], list[int]], None]  # (batch, row, tokens fed, their columns)


class Writer:
    """Writes lines on a batch's rows. `stops` end a line (besides a newline); `seed` seeds sampling;
    `drafts` (greedy only) checks a guessed continuation in the same pass as the token before it."""

    def __init__(self, tokenizer: Any, runner: Runner, stops: list[int], seed: int = 0, drafts: bool = True) -> None:
        self.tokenizer, self.runner, self.use_drafts = tokenizer, runner, drafts
        self.stats = runner.stats
        self.stops = {tokenizer.eos_token_id, *stops} - {None}
        self.generator = torch.Generator().manual_seed(seed)
        self._drafts: dict[tuple[int, ...], list[int]] = {}

    def walk(self, batch: Batch, candidates: dict[int, list[list[int]]], temperatures: dict[int, float]) -> dict[int, int]:
        """Per row: the index of the candidate the model writes, token by token, each token picked
        (argmax, or sampled at the row's temperature) among those that continue a candidate still
        left, until one is left. Rows step together, one token each per forward pass; the tokens fed
        are dropped from the cache after. A row without candidates gets index 0 (past its list)."""
        chosen = {row: 0 for row, cands in candidates.items() if not cands}
        left = {row: list(range(len(cands))) for row, cands in candidates.items() if cands}
        logprobs = {row: batch.streams[row].logprobs for row in left}
        mark, depth = batch.mark(), 0
        while left:
            step = {}
            for row, indices in list(left.items()):
                cands = candidates[row]
                complete = [i for i in indices if len(cands[i]) <= depth]  # duplicates, or one a prefix of others
                if len(indices) == 1 or complete:
                    chosen[row] = (complete or indices)[0]
                    del left[row]
                    continue
                options = sorted({cands[i][depth] for i in indices})
                token = options[self.pick([float(logprobs[row][t]) for t in options], temperatures[row])]
                left[row] = [i for i in indices if cands[i][depth] == token]
                if len(left[row]) > 1:
                    step[row] = [token]
            depth += 1
            if step:
                logits = batch.forward(step)
                for row in step:
                    logprobs[row] = torch.log_softmax(logits[row][0].float(), dim=-1)
        batch.rewind(mark)
        return chosen

    def write(self, batch: Batch, forced: dict[int, list[int]], limits: dict[int, int],
              temperatures: dict[int, float], keep: Keep) -> dict[int, str]:
        """Per row: text generated after its cached text and `forced` tokens, to a newline, EOS or
        its limit; all rows step together and the generated tokens are dropped from the cache after.
        `keep` is told each row's tokens fed (forced and written) and their columns."""
        if not forced:
            return {}
        if len(forced) < len(batch.streams):  # decode only the rows that write: a smaller batch, or in place
            rows = sorted(forced)
            texts = self.write(Batch(self.runner, [batch.streams[r] for r in rows]),
                               {i: forced[r] for i, r in enumerate(rows)}, {i: limits[r] for i, r in enumerate(rows)},
                               {i: temperatures[r] for i, r in enumerate(rows)}, keep)
            return {r: texts[i] for i, r in enumerate(rows)}
        mark = batch.mark()
        logprobs = {row: batch.streams[row].logprobs for row in forced}
        with_forced = {row: ids for row, ids in forced.items() if ids}
        columns: dict[int, list[int]] = {row: [] for row in forced}  # where each token fed to a row went
        if with_forced:
            start = batch.cache.get_seq_length()
            logits = batch.forward(with_forced)
            for row, ids in with_forced.items():
                logprobs[row] = torch.log_softmax(logits[row][len(ids) - 1].float(), dim=-1)
                columns[row] = list(range(start, start + len(ids)))
        out: dict[int, list[int]] = {row: [] for row in forced}
        live = set(forced)
        while live:
            step, drafts = {}, {}
            for row in sorted(live):
                if not self.extend(out[row], self.sample(logprobs[row], temperatures[row]), limits[row]):
                    live.discard(row)
                    continue
                drafts[row] = self._draft(batch.streams[row].ids[-DRAFT_KEY:] + forced[row] + out[row],
                                          limits[row] - len(out[row]), temperatures[row])
                step[row] = [out[row][-1], *drafts[row]]
            if not step:
                break
            start = batch.cache.get_seq_length()
            logits = batch.forward(step, count=False)
            for row, fed in step.items():
                after = torch.log_softmax(logits[row][:len(fed)].float(), dim=-1)  # after each token fed
                greedy = after.argmax(dim=-1).tolist()
                used = 1  # positions whose next-token guess is taken: the sampled token's, then each draft token's
                for guess in drafts[row]:  # a draft token counts only where greedy decoding would have written it
                    if greedy[used - 1] != guess:
                        break
                    used += 1
                    self.stats["draft_tokens_accepted"] += 1
                    if not self.extend(out[row], guess, limits[row]):
                        live.discard(row)
                        break
                logprobs[row] = after[used - 1]
                columns[row] += range(start, start + used)
                if used < len(fed):  # rejected draft tokens: hidden from this row from now on
                    batch.valid[row, start + used:start + len(fed)] = False
                    batch.pos[row] -= len(fed) - used
        for row, tokens in out.items():
            keep(batch, row, (forced[row] + tokens)[:len(columns[row])], columns[row])
        batch.rewind(mark)
        for row, tokens in out.items():
            self._remember(batch.streams[row].ids[-DRAFT_KEY:] + forced[row] + tokens)
            batch.streams[row].tokens += len(tokens)
            self.stats["tokens_generated"] += len(tokens)
        return {row: self.tokenizer.decode(tokens, skip_special_tokens=True).split("\n")[0] for row, tokens in out.items()}

    def pick(self, scores: list[float], temperature: float) -> int:
        """The index of the best score, or one sampled from their softmax at `temperature` above 0."""
        if temperature <= 0:
            return max(range(len(scores)), key=scores.__getitem__)
        probs = torch.softmax(torch.tensor(scores) / temperature, dim=0)
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def extend(self, written: list[int], token: int, limit: int) -> bool:
        """Append `token` to a line being written; False when the line has ended (a stop token, which
        is not appended, a newline, or the limit)."""
        if token in self.stops:
            return False
        written.append(token)
        return "\n" not in self.tokenizer.decode([token]) and len(written) < limit

    def _draft(self, history: list[int], room: int, temperature: float) -> list[int]:
        """Tokens that followed the last DRAFT_KEY tokens of `history` the last time this engine wrote
        them (thoughts repeat their phrasing across turns and episodes), to check in one pass."""
        if not self.use_drafts or temperature > 0 or room <= 1:
            return []
        return self._drafts.get(tuple(history[-DRAFT_KEY:]), [])[:room - 1]

    def _remember(self, written: list[int]) -> None:
        for end in range(DRAFT_KEY, len(written)):
            self._drafts[tuple(written[end - DRAFT_KEY:end])] = written[end:end + DRAFT_LENGTH]

    def sample(self, logprobs: torch.Tensor, temperature: float) -> int:
        """The next token: the likeliest at temperature 0, else drawn from the tempered distribution."""
        if temperature <= 0:
            return int(torch.argmax(logprobs))
        probs = torch.softmax(logprobs.cpu() / temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self.generator))
