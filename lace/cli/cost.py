"""`lace cost`: tokens, cost and calls of a session from `llm_calls`, per thread (with subtree
totals), model or day, with the share of input read from the providers' prompt caches; models
with no known price are marked `unpriced`, never $0."""

from __future__ import annotations

import argparse
from typing import Any

from lace.cli.board import board_of
from lace.cli.output import print_json, say
from lace.core.usage import Totals, subtree_totals, totals_by

HEADER = (f"{'calls':>6} {'failed':>6} {'cut':>4} {'in':>9} {'cached':>6} {'out':>9} "
          f"{'total':>9}  {'cost':<20}")


def _cells(totals: Totals) -> str:
    return (f"{totals.calls:>6} {totals.failed:>6} {totals.cut:>4} {totals.tokens_in:>9} "
            f"{_share(totals.cached_share):>6} {totals.tokens_out:>9} {totals.tokens:>9}  "
            f"{totals.cost_text():<20}")


def _share(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def cost_command(args: argparse.Namespace) -> int:
    """`lace cost [--session ID] [--by thread|model|day] [--json]`."""
    with board_of(args) as board:
        usage = board.usage(args.session)
    session, groups, threads, models = usage.session, usage.groups, usage.threads, usage.models
    rows = totals_by(groups, args.by)
    total = sum(rows.values(), Totals())
    unpriced = sorted({group.model for group in groups if group.unpriced})
    if args.by == "thread":
        keys = threads
        subtree = subtree_totals(threads, rows)
    else:
        keys, subtree = sorted(rows), {}
    if args.json:
        print_json(_document(session.id, args.by, keys, rows, subtree, models, total, unpriced))
        return 0
    say(f"Session {session.id}" + (f": {session.title}" if session.title else ""), one_line=True)
    if subtree:  # the thread's model (the one it is on now) after its id
        labels = {key: f"{_label(key, args.by)}  {models.get(key, '(no agent)')}" for key in keys}
    else:
        labels = {key: key for key in keys}
    width = max([len(args.by), 5] + [len(label) for label in labels.values()])
    say(f"{args.by:<{width}}  {HEADER}{'subtree' if subtree else ''}".rstrip(), one_line=True)
    for key in keys:
        below = (f"{subtree[key].calls} calls {subtree[key].tokens} tok "
                 f"{subtree[key].cost_text()}") if subtree else ""
        say(f"{labels[key]:<{width}}  {_cells(rows.get(key, Totals()))}{below}".rstrip(),
            one_line=True)
    say(f"{'total':<{width}}  {_cells(total)}".rstrip(), one_line=True)
    if total.cache_read_tokens or total.cache_write_tokens:
        say(f"input: {total.uncached_in} uncached, {total.cache_read_tokens} read from the "
            f"prompt cache ({_share(total.cached_share)}), {total.cache_write_tokens} written to "
            "it", one_line=True)
    if unpriced:
        say(f"unpriced: {', '.join(unpriced)} (no known price: their tokens are counted, "
            "their cost is not)", one_line=True)
    return 0


def _label(key: str, by: str) -> str:
    """A thread indented by its depth; a model or a day as it is."""
    return f"{'  ' * key.count('.')}{key}" if by == "thread" else key


def _document(session_id: str, by: str, keys: list[str], rows: dict[str, Totals],
              subtree: dict[str, Totals], models: dict[str, str], total: Totals,
              unpriced: list[str]) -> dict[str, Any]:
    """What `--json` prints."""
    items = []
    for key in keys:
        item: dict[str, Any] = {by: key, **rows.get(key, Totals()).as_dict()}
        if subtree:
            item["model"] = models.get(key)
            item["subtree"] = subtree[key].as_dict()
        items.append(item)
    return {"session": session_id, "by": by, "rows": items, "total": total.as_dict(),
            "unpriced_models": unpriced}
