"""Driving lace's bash completion as bash drives it on TAB, for the tests of what it offers."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from tests.processes import lace_env

BIN = Path(sys.executable).parent


def completions(home: Path, lines: list[str], cwd: Path | None = None) -> list[list[str]]:
    """What lace's bash completion offers at the end of each command line, in one plain bash
    (started in `cwd`)."""
    script = ['eval "$(lace completion bash)"',
              'function=$(complete -p lace | sed -E "s/.* -F ([^ ]+) .*/\\1/")',
              'echo "completion: $(complete -p lace)"']
    for line in lines:
        script += [f"COMP_LINE={shlex.quote(line)}", 'COMP_POINT=${#COMP_LINE}',
                   'read -r -a COMP_WORDS <<< "$COMP_LINE"',
                   '[[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")',
                   'COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))', "COMP_TYPE=9", "COMPREPLY=()",
                   '"$function" lace "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"',
                   'echo "offered: ${COMPREPLY[*]}"']
    env = {**lace_env(home), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", "\n".join(script)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=cwd)
    assert done.returncode == 0, done.stderr
    first, *offered = done.stdout.splitlines()
    assert first == "completion: complete -o bashdefault -o default -o nospace " \
                    "-F _python_argcomplete lace"
    assert len(offered) == len(lines), done.stdout + done.stderr
    return [line.removeprefix("offered: ").split() for line in offered]
