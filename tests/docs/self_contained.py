#!/usr/bin/env python3
"""The repository refers only to itself: no path of a build machine, no file outside the tree.

Usage: self_contained.py REPO_ROOT [MAF_SANDBOX_BINARY]

Checks the user-facing text (README, docs, examples, bench notes, sources and their comments, build
and script files, and, given the binary, every command's --help):
  - no absolute path of a person's or a build machine's directory (/work/..., /home/..., /root/...,
    /Users/...) outside the tests, whose guest paths are data;
  - no relative path that climbs out of the repository (into a sibling's shared notes, or a link
    above the root);
  - every Markdown file a text names is a file in the repository, and every relative Markdown
    link resolves.
Prints each finding as FILE:LINE: what; exits 1 when there is any.
"""
import os
import re
import subprocess
import sys

TEXT_SUFFIXES = (".md", ".cpp", ".hpp", ".h", ".py", ".sh", ".cmake", ".txt", ".mjs", ".json",
                 ".toml", ".cfg", ".in")
SKIPPED_DIRS = {".git", "build", "node_modules", "corpus", "__pycache__"}
# Guest paths in tests are data (a passwd line, a path battery); the rule is for what people read.
MACHINE_PATH_EXEMPT = ("tests/", "fuzz/")
MACHINE_PATH = re.compile(r"(?<![\w./:-])/(work|home|root|Users)/[\w.-]")
OUT_OF_TREE = re.compile(r"\.\./(shared|design|reference|seed)\b")
MD_NAME = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
MD_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def text_files(root):
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in SKIPPED_DIRS and not d.startswith("build")]
        for name in files:
            if name.endswith(TEXT_SUFFIXES) or name in ("Makefile", "CMakeLists.txt", "bootstrap"):
                path = os.path.join(directory, name)
                yield os.path.relpath(path, root)


def check_text(relative, text, md_names, root, findings):
    machine_paths = not relative.startswith(MACHINE_PATH_EXEMPT)
    for number, line in enumerate(text.split("\n"), 1):
        where = f"{relative}:{number}"
        if machine_paths:
            for match in MACHINE_PATH.finditer(line):
                findings.append(f"{where}: a machine path '{match.group(0)}...'")
        for match in OUT_OF_TREE.finditer(line):
            findings.append(f"{where}: a path out of the repository '{match.group(0)}'")
        for match in MD_NAME.finditer(line):
            named = match.group(1)
            if os.path.basename(named) not in md_names:
                findings.append(f"{where}: names '{named}', which is not in the repository")
        if relative.endswith(".md"):
            for match in MD_LINK.finditer(line):
                target = match.group(1)
                if re.match(r"^[a-z]+:", target) or target.startswith("/"):
                    continue  # a URL, or an absolute path shown as an example
                resolved = os.path.normpath(os.path.join(root, os.path.dirname(relative), target))
                if not resolved.startswith(os.path.abspath(root) + os.sep):
                    findings.append(f"{where}: the link '{target}' leaves the repository")
                elif not os.path.exists(resolved):
                    findings.append(f"{where}: the link '{target}' names nothing")


def help_texts(binary):
    """`--help` of the command and of each of its commands, as (name, text)."""
    def run(args):
        done = subprocess.run([binary, *args, "--help"], capture_output=True, text=True, timeout=30)
        return done.stdout + done.stderr

    top = run([])
    yield "maf-sandbox --help", top
    section = top.split("Subcommands:", 1)
    if len(section) == 2:
        for line in section[1].split("\n"):
            words = line.split()
            if line.startswith("  ") and words:
                yield f"maf-sandbox {words[0]} --help", run([words[0]])


def main():
    root = os.path.abspath(sys.argv[1])
    files = list(text_files(root))
    md_names = {os.path.basename(f) for f in files if f.endswith(".md")}
    findings = []
    for relative in files:
        with open(os.path.join(root, relative), encoding="utf-8", errors="replace") as f:
            check_text(relative, f.read(), md_names, root, findings)
    if len(sys.argv) > 2:
        for name, text in help_texts(sys.argv[2]):
            check_text(name, text, md_names, root, findings)
    for finding in findings:
        print(finding)
    if findings:
        print(f"{len(findings)} reference(s) to something outside the repository", file=sys.stderr)
        return 1
    print(f"{len(files)} files: every reference stays inside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
