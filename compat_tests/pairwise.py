"""Covering rows of a sweep: the rows of ``itertools.product(...)`` that hold every pair of values any two factors
take together, so a grid or a parametrized sweep meets every two-feature interaction in far fewer runs than the
whole product (most faults need at most two features to show)."""

from __future__ import annotations


def pairwise(rows: list[tuple]) -> list[tuple]:
    """Rows of ``rows`` (a sweep: tuples of factor values, as ``itertools.product`` makes them) that hold every
    pair of values any two factors take together in ``rows``, in their order: chosen greedily, each next row
    the first that holds the most pairs not yet held."""
    def pairs(row: tuple) -> set:
        return {(i, row[i], j, row[j]) for i in range(len(row)) for j in range(i + 1, len(row))}

    left = set().union(*map(pairs, rows)) if rows else set()
    chosen = []
    while left:
        best = max(rows, key=lambda row: len(pairs(row) & left))
        chosen.append(best)
        left -= pairs(best)
    return [row for row in rows if row in chosen]
