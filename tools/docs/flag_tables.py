#!/usr/bin/env python3
"""The docs' flag tables, generated from the programs' --help (CLI11's format).

A table in a Markdown file sits between two markers naming the program:

    <!-- flags: collie-bench -->
    | flag | default | meaning |
    ...
    <!-- /flags -->

  flag_tables.py BIN_DIR --write DOC...   regenerate every marked table in place
  flag_tables.py BIN_DIR --check DOC...   exit 1, showing the difference, when a
                                          table is not what --help prints now

A hand-written table (collie-run's, whose --help shows no defaults) sits
between "<!-- flags-listed: collie-run -->" and "<!-- /flags -->" instead:
--check then only requires every flag --help prints to be in it.

ctest runs --check over docs/ ("docs: the flag tables are what --help prints").
"""
import difflib
import os
import re
import subprocess
import sys

MARKER = re.compile(r"(<!-- flags: (\S+) -->\n)(.*?)(<!-- /flags -->)", re.S)
LISTED = re.compile(r"<!-- flags-listed: (\S+) -->\n(.*?)<!-- /flags -->", re.S)
SECTION = re.compile(r"^(\S[^:]*):\s*$")


def help_text(bin_dir, program):
    out = subprocess.run([os.path.join(bin_dir, program), "--help"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    return out.stdout


def options(text):
    """[(names, spec, description)] of every option in --help, in order."""
    rows, in_options = [], False
    for line in text.split("\n"):
        header = SECTION.match(line)
        if header:
            in_options = header.group(1) not in ("Usage", "Examples", "Example")
            continue
        if not in_options:
            continue
        if re.match(r"^  -", line):
            parts = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            head = parts[0]
            names, _, spec = head.partition(" ")
            rows.append([names, spec, parts[1] if len(parts) > 1 else ""])
        elif rows and line.startswith("    ") and line.strip():
            rows[-1][2] = (rows[-1][2] + " " + line.strip()).strip()
    return rows


def cell(text):
    return text.replace("|", "\\|")


def table(text):
    lines = ["| flag | default | meaning |", "| --- | --- | --- |"]
    for names, spec, desc in options(text):
        if names in ("-h,--help", "--version"):
            continue
        flags = ", ".join(f"`{n}`" for n in names.split(","))
        spec_no_env = re.sub(r"\(Env:\w+\)", "", spec)
        default = re.search(r"=(\S+)\s*$", spec_no_env.strip())
        notes = []
        span = re.search(r"in \[(\S+) - (\S+)\]", spec)
        if span:
            notes.append(f"{span.group(1)} to {span.group(2)}")
        choices = re.search(r"\{([^}]*)\}", spec)
        if choices:
            notes.append("one of " + ", ".join(f"`{c}`" for c in choices.group(1).split(",")))
        env = re.search(r"\(Env:(\w+)\)", spec)
        if env:
            notes.append(f"environment `{env.group(1)}`")
        meaning = desc + (f" ({'; '.join(notes)})" if notes else "")
        lines.append(f"| {flags} | {('`' + default.group(1) + '`') if default else ''} | "
                     f"{cell(meaning)} |")
    return "\n".join(lines) + "\n"


def missing_flags(text, bin_dir):
    """Flags --help prints that a hand-written (flags-listed) table lacks."""
    missing = []
    for program, body in LISTED.findall(text):
        for names, _, _ in options(help_text(bin_dir, program)):
            if names in ("-h,--help", "--version"):
                continue
            first = names.split(",")[0]
            if f"`{first}`" not in body:
                missing.append(f"{program} {first}")
    return missing


def regenerate(doc, bin_dir):
    text = open(doc).read()
    return MARKER.sub(lambda m: m.group(1) + table(help_text(bin_dir, m.group(2))) + m.group(4),
                      text), text


def main():
    if len(sys.argv) < 4 or sys.argv[2] not in ("--write", "--check"):
        sys.exit(__doc__)
    bin_dir, mode, docs = sys.argv[1], sys.argv[2], sys.argv[3:]
    stale, found = [], 0
    for doc in docs:
        new, old = regenerate(doc, bin_dir)
        found += len(MARKER.findall(old)) + len(LISTED.findall(old))
        for flag in missing_flags(old, bin_dir):
            stale.append(doc)
            print(f"{doc}: the table of {flag.split()[0]} lacks {flag.split()[1]}, which --help lists")
        if new == old:
            continue
        if mode == "--write":
            open(doc, "w").write(new)
            print(f"flag_tables: rewrote {doc}")
        else:
            stale.append(doc)
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                       doc, doc + " (from --help)"))
    if mode == "--check" and found == 0:
        sys.exit("flag_tables: no marked table in " + " ".join(docs))
    if stale:
        sys.exit("flag_tables: stale tables in " + ", ".join(stale) +
                 f"; run tools/docs/flag_tables.py {bin_dir} --write {' '.join(stale)}")


if __name__ == "__main__":
    main()
