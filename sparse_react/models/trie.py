"""Candidate continuations as a token trie: shared prefixes (`go to` in every `go to X`) are fed
once, and a best-first search feeds only the branches that can still win."""

from __future__ import annotations

import torch


def trie_nodes(candidates: list[list[int]]) -> tuple[dict[tuple[int, ...], int], list[int], list[int]]:
    """The distinct proper prefixes of the candidates as trie nodes: index by prefix, each node's
    last token, and its parent's index (-1 for the root's children), parents before children."""
    nodes: dict[tuple[int, ...], int] = {}
    tokens: list[int] = []
    parents: list[int] = []
    for c in candidates:
        for k in range(1, len(c)):
            key = tuple(c[:k])
            if key not in nodes:
                nodes[key] = len(tokens)
                tokens.append(c[k - 1])
                parents.append(nodes.get(key[:-1], -1))
    return nodes, tokens, parents


class TrieSearch:
    """Best-first search of one row's candidate trie for the candidate of highest mean log-probability.

    A node (a proper prefix of some candidates) can be fed once its parent has been: its prefix's
    log-probability sum is then known, and divided by the longest candidate below it, it bounds
    every mean below it from above (each log-probability is at most 0). Nodes whose bound falls
    below the best complete candidate are never fed, so the best candidate is the one the whole
    trie would pick. Candidates left unscored get -inf.
    """

    def __init__(self, candidates: list[list[int]], root: torch.Tensor) -> None:
        self.candidates = candidates
        nodes, self.tokens, self.parents = trie_nodes(candidates)
        self.depth: list[int] = []
        for parent in self.parents:
            self.depth.append(self.depth[parent] + 1 if parent >= 0 else 0)
        self.longest = [0] * len(self.tokens)
        self.ends: dict[int, list[int]] = {}
        self.children: dict[int, list[int]] = {}
        for node, parent in enumerate(self.parents):
            self.children.setdefault(parent, []).append(node)
        for index, c in enumerate(candidates):
            self.ends.setdefault(nodes[tuple(c[:-1])] if len(c) > 1 else -1, []).append(index)
            for k in range(1, len(c)):
                node = nodes[tuple(c[:k])]
                self.longest[node] = max(self.longest[node], len(c))
        self.sums: dict[int, float] = {}
        self.column: dict[int, int] = {}
        self.frontier: list[int] = []
        self.scores = [float("-inf")] * len(candidates)
        self.best, self.best_index = float("-inf"), -1
        self.nodes = nodes
        self.fed(-1, root)

    def fed(self, node: int, logprobs: torch.Tensor) -> None:
        """`node` (-1: the root) has been fed; `logprobs` is the next-token distribution after it."""
        before = self.sums.get(node, 0.0)
        for index in self.ends.get(node, []):
            c = self.candidates[index]
            self.scores[index] = (before + float(logprobs[c[-1]])) / len(c)
            if self.scores[index] > self.best or (self.scores[index] == self.best and index < self.best_index):
                self.best, self.best_index = self.scores[index], index
        for child in self.children.get(node, []):
            self.sums[child] = before + float(logprobs[self.tokens[child]])
            self.frontier.append(child)

    def next(self, width: int) -> list[int]:
        """Up to `width` nodes to feed next, highest bound first (none: the search is over); one
        until a candidate is complete, so that the likeliest branch is finished first and its
        score prunes the rest."""
        bound = {node: self.sums[node] / self.longest[node] for node in self.frontier}
        self.frontier = sorted((node for node in self.frontier if bound[node] >= self.best), key=bound.__getitem__,
                               reverse=True)
        width = width if self.best > float("-inf") else 1
        chosen, self.frontier = self.frontier[:width], self.frontier[width:]
        return chosen

    def columns(self, index: int) -> list[int]:
        """The batch columns candidate `index`'s tokens but its last were fed into (it is complete)."""
        c = self.candidates[index]
        return [self.column[self.nodes[tuple(c[:k])]] for k in range(1, len(c))]

    def ancestors(self, node: int) -> list[int]:
        """The batch columns of the nodes above `node` (all fed before it)."""
        columns = []
        while (node := self.parents[node]) >= 0:
            columns.append(self.column[node])
        return columns
