#!/usr/bin/env python3
"""docs/architecture.md matches the tree, and tests/README.md matches tests/.

Fails (exit 1, one line per problem) when:
  - docs/architecture.md names a path under src/, include/, tests/, cmake/, bench/, fuzz/,
    examples/, scripts/, docs/ or .ci/ that does not exist;
  - a folder under src/ is not named in docs/architecture.md as `src/<folder>`;
  - tests/README.md names a test folder (a `folder/` in its tables) that does not exist under
    tests/, or a folder directly under tests/ is not named there.
Only the standard library: no build needed.
"""
import os
import re
import sys

TOP = ("src", "include", "tests", "cmake", "bench", "fuzz", "examples", "scripts", "docs", ".ci")
# A path token: one of the top folders, then path characters. Stops at `<`, `*`, `{`, spaces and
# backticks, so placeholders and patterns are cut to their fixed prefix.
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./+-]*)" % "|".join(re.escape(t) for t in TOP))


def architecture_problems(root):
    problems = []
    with open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8") as f:
        text = f.read()
    named = set()
    for match in PATH.finditer(text):
        token = match.group(1).rstrip(".")
        after = text[match.end():match.end() + 1]
        if after in ("*", "{", "<"):
            continue  # a pattern: only its fixed prefix was read
        named.add(token.rstrip("/"))
        if not os.path.exists(os.path.join(root, token)):
            problems.append(f"docs/architecture.md names '{token}', which does not exist")
    for dirpath, dirnames, _ in os.walk(os.path.join(root, "src")):
        dirnames.sort()
        folder = os.path.relpath(dirpath, root).replace(os.sep, "/")
        if folder not in named:
            problems.append(f"docs/architecture.md does not name the folder '{folder}'")
    return problems


def tests_readme_problems(root):
    problems = []
    tests = os.path.join(root, "tests")
    with open(os.path.join(tests, "README.md"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    named = set()
    for line in lines:
        cells = line.split("|")
        if not line.startswith("|") or len(cells) < 3:
            continue
        for folder in re.findall(r"`([\w./-]+/)`", cells[1]):
            # A subfolder's row (`badinput/unit/`) names its parent too.
            named.add(folder.split("/")[0])
            if not os.path.isdir(os.path.join(tests, folder)):
                problems.append(f"tests/README.md names the folder '{folder}', which is not "
                                f"under tests/")
    for entry in sorted(os.listdir(tests)):
        if os.path.isdir(os.path.join(tests, entry)) and entry not in named:
            problems.append(f"tests/README.md does not name the folder 'tests/{entry}'")
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    problems = architecture_problems(root) + tests_readme_problems(root)
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
