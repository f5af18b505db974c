#!/usr/bin/env python3
"""Function and file sizes under src/tandem, against the limits of
docs/architecture.md ("Sizes"): no function over --function-lines lines and
no translation unit (.cc/.cu) over --file-lines, except those listed in the
exceptions file with their size when the limit came in; a listed one may
shrink but not grow, and a list entry that no longer exceeds the limit must
be deleted (so the list only gets shorter).

A function is a definition at namespace scope (its first line in column 0,
as this codebase's style puts them) through the closing brace in column 0;
its lambdas and local classes count towards it. Member functions defined
inside a class body are counted with the class, not checked.
    python3 scripts/check-sizes.py [--root src/tandem] [--exceptions FILE]
"""
import argparse
import os
import re
import sys

NOT_A_FUNCTION = re.compile(
    r"^(#|//|/\*|\*|namespace\b|class\b|struct\b|union\b|enum\b|extern\b|using\b|"
    r"typedef\b|template\s*<[^>]*>\s*(class|struct)\b|static_assert\b|}|\)|\s|$)")


def functions(path):
    """(name, first line, line count) of each namespace-scope definition."""
    with open(path, errors="replace") as f:
        lines = f.read().split("\n")
    found, i = [], 0
    while i < len(lines):
        line = lines[i]
        if NOT_A_FUNCTION.match(line):
            i += 1
            continue
        # The declaration runs until a line ending in '{' (a definition) or
        # ';' (a declaration or variable).
        j = i
        while j < len(lines) and not re.search(r"[{;]\s*(//.*)?$", lines[j]):
            j += 1
        if j >= len(lines) or not re.search(r"{\s*(//.*)?$", lines[j]):
            i = j + 1
            continue
        if re.search(r"=\s*{\s*$", lines[j]) or re.match(r"^(const|constexpr|static)\b.*=", line):
            # A braced variable initialiser, not a function (but a lambda
            # bound to a variable is: "= [] {").
            if not re.search(r"\]\s*(\(.*\))?\s*(mutable\s*)?{\s*$", lines[j]):
                i = j + 1
                continue
        end = j
        while end < len(lines) and not re.match(r"^}", lines[end]):
            end += 1
        name = re.sub(r"\s*\(.*", "", line).split()[-1] if "(" in line else line.strip()
        found.append((name, i + 1, end - i + 1))
        i = end + 1
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default="src/tandem")
    p.add_argument("--exceptions", default="scripts/size-exceptions.txt")
    p.add_argument("--function-lines", type=int, default=100)
    p.add_argument("--file-lines", type=int, default=700)
    p.add_argument("--list", action="store_true", help="print every function over the limit")
    a = p.parse_args()
    allowed = {}
    if os.path.exists(a.exceptions):
        for raw in open(a.exceptions):
            entry = raw.split("#")[0].split()
            if len(entry) == 2:
                allowed[entry[0]] = int(entry[1])
    over = {}
    for directory, _, names in os.walk(a.root):
        for name in sorted(names):
            if not name.endswith((".cc", ".cu", ".h", ".cuh")):
                continue
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, a.root)
            if name.endswith((".cc", ".cu")):
                count = sum(1 for _ in open(path, errors="replace"))
                if count > a.file_lines:
                    over[rel] = count
            for function, line, count in functions(path):
                if count > a.function_lines:
                    over[f"{rel}:{function}"] = count
    if a.list:
        for key, count in sorted(over.items(), key=lambda kv: -kv[1]):
            print(f"{key} {count}")
        return 0
    problems = []
    for key, count in sorted(over.items()):
        limit = a.file_lines if ":" not in key else a.function_lines
        if key not in allowed:
            problems.append(f"{key}: {count} lines, over the limit of {limit}")
        elif count > allowed[key]:
            problems.append(f"{key}: {count} lines, grew past the {allowed[key]} it was allowed")
    for key in sorted(set(allowed) - set(over)):
        problems.append(f"{key}: within the limit now; delete it from {a.exceptions}")
    if problems:
        print("check-sizes: " + "\n  ".join([""] + problems), file=sys.stderr)
        return 1
    print(f"check-sizes: no function over {a.function_lines} lines and no file over "
          f"{a.file_lines} beyond the {len(allowed)} listed exceptions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
