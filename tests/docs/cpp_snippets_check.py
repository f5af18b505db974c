#!/usr/bin/env python3
"""The documentation's C++ against the headers: every ```cpp block of
README.md and docs/*.md is compiled (syntax and types, -fsyntax-only) as the
body of a function of its own, so a renamed field or a changed signature
fails here instead of in a user's editor. A block's free names (a dataset, a
model builder) are the function's parameters, declared in an HTML comment
right above the fence:
    <!-- cpp-snippet: const data::Split& fashion, int64_t step -->
Each function is in namespace tandem; a block's #include lines
go to the top of the file. `#line` directives make the compiler's errors name
the page and its line.
    cpp_snippets_check.py --compiler c++ --include src --include build/generated --source .
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

CONTEXT = re.compile(r"<!--\s*cpp-snippet:(.*?)-->", re.S)


def snippets(path):
    """(first code line number, parameters, code lines) of each ```cpp block."""
    found, fence, params, start, code, previous = [], False, "", 0, [], ""
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            stripped = raw.strip()
            if not fence and stripped in ("```cpp", "```c++"):
                m = CONTEXT.fullmatch(previous)
                fence, params, start, code = True, m.group(1).strip() if m else "", number + 1, []
            elif fence and stripped.startswith("```"):
                fence = False
                found.append((start, params, code))
            elif fence:
                code.append(raw.rstrip("\n"))
            if stripped:
                previous = stripped
    return found


def translation_unit(pages):
    """One source holding every block as a function, and the block count."""
    includes, bodies, count = {'#include "tandem/tandem.h"'}, [], 0
    for page in pages:
        name = os.path.abspath(page)
        for start, params, code in snippets(page):
            count += 1
            body = []
            for line in code:
                if line.startswith("#include"):
                    includes.add(line.strip())
                    body.append("")
                else:
                    body.append(line)
            # The parameters' types are named from inside namespace tandem.
            # The signature gets the comment's line (two above the code).
            bodies.append(f'namespace tandem {{\n#line {start - 2} "{name}"\n'
                          f"void snippet_{count}({params}) {{\n"
                          f'#line {start} "{name}"\n' + "\n".join(body) + "\n}\n}\n")
    return "\n".join(sorted(includes)) + "\n#include <cstdint>\n\n" + "\n".join(bodies), count


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--compiler", required=True)
    parser.add_argument("--include", action="append", default=[])
    parser.add_argument("--source", required=True)
    parser.add_argument("--files", nargs="*", help="pages to check instead of README.md and docs/*.md")
    args = parser.parse_args()
    pages = args.files or [os.path.join(args.source, "README.md")] + sorted(
        glob.glob(os.path.join(args.source, "docs", "*.md")))
    source, count = translation_unit(pages)
    if count == 0:
        print("cpp_snippets_check: no ```cpp block found (wrong --source?)")
        return 1
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "snippets.cc")
        with open(path, "w", encoding="utf-8") as f:
            f.write(source)
        command = [args.compiler, "-std=c++20", "-fsyntax-only", "-Wno-unused-variable"]
        command += [f"-I{d}" for d in args.include] + [path]
        run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        print(run.stdout + run.stderr)
        print(f"cpp_snippets_check: the docs' C++ does not compile ({count} blocks)")
        return 1
    print(f"cpp_snippets_check: {count} C++ blocks compile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
