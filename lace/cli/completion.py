"""`lace completion bash|zsh|fish`: the shell code that completes lace's commands and options.

argcomplete answers each TAB by running `lace` itself with the parser `lace --help` uses, so
the completion never goes stale after an upgrade and knows every command and option without a
list kept by hand; its bash code needs no bash-completion package, and it writes zsh and fish
code from the same parser."""

from __future__ import annotations

import argparse

SHELLS = ("bash", "zsh", "fish")


def completion_command(args: argparse.Namespace) -> int:
    """Print the completion script for the shell."""
    from argcomplete.shell_integration import shellcode

    print(shellcode(["lace"], shell=args.shell), end="")
    return 0
