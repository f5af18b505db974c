#!/usr/bin/env python3
"""The documentation's command lines against the `tandem` command itself:
every `tandem ...` invocation in a shell block of README.md and docs/*.md
names a command (and subcommand) that exists and passes only flags that
command's --help lists, every flag in README's table of `train` options
is one of `tandem train --help`'s, and every strategy and collectives
backend that those flags' help lists is run by some documented command
line. Fails naming the file, the line and the flag or command.
    command_lines_check.py --tandem build/tandem --source .
"""
import argparse
import functools
import glob
import os
import re
import shlex
import subprocess
import sys

FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")


@functools.lru_cache(maxsize=None)
def help_text(tandem, words):
    """`tandem WORDS --help`'s output (words a tuple), or None if it fails."""
    run = subprocess.run([tandem, *words, "--help"], capture_output=True, text=True, timeout=60)
    return run.stdout if run.returncode == 0 else None


def help_of(tandem, words, cache):
    """(flags, subcommands) of `tandem WORDS --help`, or None if it fails. A
    command whose help says that every other flag is a `tandem train` flag
    (tune search) takes train's flags too."""
    key = tuple(words)
    if key not in cache:
        text = help_text(tandem, key)
        if text is None:
            cache[key] = None
            return None
        subs = set()
        if "Subcommands:" in text:
            for line in text.split("Subcommands:", 1)[1].splitlines():
                m = re.match(r"  ([a-z][a-z0-9-]*)\s", line)
                if m:
                    subs.add(m.group(1))
        flags = set(FLAG.findall(text))
        if "every other flag is a tandem train flag" in " ".join(text.split()):
            flags |= help_of(tandem, ["train"], cache)[0]
        cache[key] = (flags, subs)
    return cache[key]


SHELL = ("sh", "bash", "console", "shell")


def shell_lines(path):
    """(line number, command line) of each shell block's lines (```sh and the
    like), continuations joined."""
    lines, fence, shell, pending, start = [], False, False, "", 0
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            stripped = raw.strip()
            if stripped.startswith("```"):
                fence = not fence
                shell = fence and stripped[3:].strip() in SHELL
                pending = ""
                continue
            if not shell:
                continue
            if not pending:
                start = number
            # A comment starts at " #" (the lines align them with spaces).
            code = re.split(r"(?:^|\s)#(?!\S*[\"'])", raw.rstrip("\n"), maxsplit=1)[0].rstrip()
            if code.endswith("\\"):
                pending += code[:-1] + " "
                continue
            lines.append((start, pending + code))
            pending = ""
    return lines


def invocations(line):
    """The argument lists that follow each `tandem` word of a command line
    that starts a command: not a path handed to a script (bench/x.sh
    build/tandem ...) or a loop's list (for b in OLD/tandem build/tandem)."""
    try:
        words = shlex.split(line, comments=False)
    except ValueError:
        return []
    found = []
    for i, word in enumerate(words):
        if os.path.basename(word) != "tandem" or word.startswith("-"):
            continue
        before = words[i - 1] if i > 0 else ""
        if before.endswith(".sh") or before == "in" or os.path.basename(before) == "tandem":
            continue
        rest = words[i + 1:]
        if not rest or not re.fullmatch(r"[a-z][a-z-]*|-.*", rest[0]):
            continue
        # `tandem launch ... -- tandem train ...`: the launch's own part.
        if "--" in rest:
            rest = rest[:rest.index("--")]
        found.append(rest)
    return found


# Flags whose every value the docs show in a command line: the strategies
# and the collectives' backends, read from the flag's own --help line.
SHOWN_CHOICES = [(("train",), "--strategy"), (("bench", "allreduce"), "--backend")]


def choices_of(tandem, words, flag):
    """The values a flag's help line lists ("a, b (note) or c"), or []."""
    for line in (help_text(tandem, tuple(words)) or "").splitlines():
        m = re.match(r"\s*" + re.escape(flag) + r"\s+\S+\s{2,}(.*)", line)
        if m:
            text = re.sub(r"\([^)]*\)", "", m.group(1))
            values = [v.strip() for v in re.split(r",| or ", text)]
            return [v for v in values if re.fullmatch(r"[a-z][a-z0-9-]*", v)]
    return []


def check_choices_shown(tandem, used, problems):
    for words, flag in SHOWN_CHOICES:
        choices = choices_of(tandem, list(words), flag)
        if len(choices) < 2:
            problems.append(f"'tandem {' '.join(words)} --help': no list of {flag} values read")
            continue
        for value in choices:
            if value not in used.get((words, flag), set()):
                problems.append(f"no documented command line runs 'tandem {' '.join(words)} "
                                f"{flag} {value}'")


def check_file(tandem, path, cache, problems, counted, used):
    for number, line in shell_lines(path):
        for args in invocations(line):
            if not args or args[0].startswith("-"):
                continue
            words = [args[0]]
            known = help_of(tandem, words, cache)
            if known is None:
                problems.append(f"{path}:{number}: 'tandem {args[0]}' is no command")
                continue
            if known[1]:
                if len(args) < 2 or args[1] not in known[1]:
                    problems.append(f"{path}:{number}: 'tandem {args[0]} {args[1] if len(args) > 1 else ''}'"
                                    f" is none of {sorted(known[1])}")
                    continue
                words.append(args[1])
                known = help_of(tandem, words, cache)
            flags, _ = known
            counted[0] += 1
            rest = args[len(words):]
            for i, arg in enumerate(rest):
                flag = arg.split("=", 1)[0]
                if FLAG.fullmatch(flag) and flag not in flags:
                    problems.append(f"{path}:{number}: 'tandem {' '.join(words)}' has no {flag}")
                value = arg.split("=", 1)[1] if "=" in arg else (rest[i + 1] if i + 1 < len(rest) else "")
                used.setdefault((tuple(words), flag), set()).add(value)


def check_train_table(tandem, readme, cache, problems):
    text = open(readme, encoding="utf-8").read()
    marker = "The main ones of `train`:"
    if marker not in text:
        problems.append(f"{readme}: the table of train options ('{marker}') is missing")
        return
    flags, _ = help_of(tandem, ["train"], cache)
    rows = 0
    for line in text.split(marker, 1)[1].lstrip().splitlines():
        if not line.startswith("|"):
            break
        first = line.split("|")[1]
        for flag in re.findall(r"`(--[a-z0-9-]+)`", first):
            rows += 1
            if flag not in flags:
                problems.append(f"{readme}: the train table's {flag} is not a flag of 'tandem train'")
    if rows < 30:
        problems.append(f"{readme}: only {rows} flags read from the train table (has it moved?)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tandem", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--files", nargs="*", help="instead of README.md and docs/*.md")
    a = parser.parse_args()
    files = a.files or [os.path.join(a.source, "README.md")] + sorted(
        glob.glob(os.path.join(a.source, "docs", "*.md")))
    cache, problems, counted, used = {}, [], [0], {}
    for path in files:
        check_file(a.tandem, path, cache, problems, counted, used)
    if not a.files:
        check_train_table(a.tandem, os.path.join(a.source, "README.md"), cache, problems)
        check_choices_shown(a.tandem, used, problems)
    if problems:
        print("command_lines_check: the docs name what the command does not have:")
        for p in problems:
            print("  " + p)
        sys.exit(1)
    print(f"command_lines_check: {counted[0]} command lines in {len(files)} files, every one fits")


if __name__ == "__main__":
    main()
