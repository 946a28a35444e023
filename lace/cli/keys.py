"""`lace keys set PROVIDER` and `lace keys list`: provider keys kept in a private file in
lace's home, used when the environment has none."""

from __future__ import annotations

import argparse
import getpass
import sys

from lace.cli.output import print_json, say
from lace.config.keys import MAX_KEY, PROVIDER_NAME, check_key, store_key, stored_keys
from lace.core.errors import LaceError


def keys_set_command(args: argparse.Namespace) -> int:
    """Ask for the key at a hidden prompt (or read one line from stdin when it is not a
    terminal) and keep it; nothing is stored for a bad name or an empty key."""
    from lace.llm.checks import key_variable

    provider = args.provider
    if not PROVIDER_NAME.fullmatch(provider):
        raise LaceError(f"{provider!r} is not a provider name (like openai or anthropic).")
    variable = key_variable(provider)
    if sys.stdin.isatty():
        key = getpass.getpass(f"Key for {provider} (kept in lace's home, used when "
                              f"{variable} is not set): ")
    else:
        key = sys.stdin.readline(MAX_KEY + 2)
    path = store_key(provider, variable, check_key(key))
    if args.json:
        print_json({"provider": provider, "variable": variable, "path": str(path)})
    say(f"Stored the key for {provider} in {path}; lace uses it when {variable} is not set.",
        one_line=True, file=sys.stderr)
    return 0


def keys_list_command(args: argparse.Namespace) -> int:
    """The providers with a stored key and their variables; never a key."""
    keys = stored_keys()
    if args.json:
        print_json([{"provider": stored.provider, "variable": stored.variable}
                    for stored in keys])
    elif not keys:
        say("No keys stored: lace keys set PROVIDER stores one.", file=sys.stderr)
    for stored in [] if args.json else keys:
        say(f"{stored.provider}  {stored.variable}", one_line=True)
    return 0


def keys_help_command(_args: argparse.Namespace) -> int:
    """`lace keys` with no action."""
    raise LaceError("choose an action: lace keys set PROVIDER, or lace keys list "
                    "(see lace keys --help)")
