"""The relabelled states of one episode trained in one pass.

A relabelled example (`sparse_react.training.relabel`) is the recorded episode up to one state, then the
expert's label there. Trained one by one, the states of a 40-step episode send its shared record
through the model 40 times to learn 40 short labels. A pack holds the record once (the trunk) and
each label as a branch after it: the branch repeats the last token of its own prefix (so that the
usual shifted loss predicts the label's first token from it), takes position ids that continue
that prefix, and attends to the trunk up to there and to itself only. Each label therefore sees
exactly the tokens it would see alone; only the trunk is shared. Packing is exact, not approximate:
`tests/test_finetune.py` checks a pack's loss against its examples' losses.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import torch

IGNORE = -100


def first_label(labels: Sequence[int]) -> int | None:
    """Index of the first trained token, or None when nothing is trained."""
    return next((i for i, label in enumerate(labels) if label != IGNORE), None)


def pack_rows(examples: Sequence[dict], rows: Sequence[dict], limit: int) -> list[dict]:
    """`rows` (tokenised `examples`, in the same order) with the relabelled states of each episode
    packed together, every pack at most `limit` tokens; other rows are returned as they are.

    Relabelled examples of the same game and run are tried in one group, longest state first: the
    first gives the trunk, and each later one joins the pack when its prefix is the trunk's (else it
    starts a pack of its own, so a wrong grouping costs speed, never correctness).
    """
    plain, groups = [], defaultdict(list)
    for example, row in zip(examples, rows):
        if "state_step" in example and first_label(row["labels"]) is not None:
            key = (example.get("rhythm"), example.get("run"), example.get("game_sha256") or example.get("game"))
            groups[key].append(row)
        else:
            plain.append(row)
    packs = []
    for group in groups.values():
        open_packs: list[_Pack] = []
        for row in sorted(group, key=lambda r: -first_label(r["labels"])):
            if not any(pack.add(row) for pack in open_packs):
                open_packs.append(_Pack(row, limit))
        packs += [pack.row() for pack in open_packs]
    return plain + packs


class _Pack:
    def __init__(self, row: dict, limit: int) -> None:
        self.trunk = row["input_ids"][: first_label(row["labels"]) - 1]
        self.limit = limit
        self.branches: list[dict] = []
        self.size = len(self.trunk)
        self.add(row)

    def add(self, row: dict) -> bool:
        start = first_label(row["labels"]) - 1  # the branch repeats this token: the label's first is predicted from it
        branch = len(row["input_ids"]) - start
        if start > len(self.trunk) or row["input_ids"][:start] != self.trunk[:start] or \
                (self.branches and self.size + branch > self.limit):
            return False
        self.branches.append({"input_ids": row["input_ids"][start:],
                              "labels": [IGNORE, *row["labels"][start + 1:]], "start": start})
        self.size += branch
        return True

    def row(self) -> dict:
        n = len(self.trunk)
        ids, labels = list(self.trunk), [IGNORE] * n
        positions, segments, reach = list(range(n)), [0] * n, [0] * n
        for number, branch in enumerate(self.branches, 1):
            width = len(branch["input_ids"])
            ids += branch["input_ids"]
            labels += branch["labels"]
            positions += range(branch["start"], branch["start"] + width)
            segments += [number] * width
            reach += [branch["start"]] * width
        return {"input_ids": ids, "labels": labels, "position_ids": positions, "segments": segments, "reach": reach}


def pack_mask(segments: torch.Tensor, reach: torch.Tensor) -> torch.Tensor:
    """The boolean attention mask (batch, 1, query, key) of packed rows: causal within a segment,
    and a branch (segment > 0) also sees the trunk (segment 0) before its `reach`. Padding has
    segment -1 and sees only itself and other padding."""
    width = segments.shape[1]
    index = torch.arange(width)
    causal = index[None, :] <= index[:, None]
    same = segments[:, :, None] == segments[:, None, :]
    trunk = (segments[:, None, :] == 0) & (index[None, None, :] < reach[:, :, None])
    return (causal[None] & (same | trunk))[:, None]
