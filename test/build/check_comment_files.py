#!/usr/bin/env python3
"""Every file a comment names exists: a comment that says "(bootstrap.cc
implements it)" after bootstrap.cc is gone sends the next reader looking for
nothing.

  check_comment_files.py SOURCE_DIR [FILE...]   exit 0 when clean, 1 listing them

Reads the comments (// in C++ and CUDA, # in Python, shell and CMake) of every
tracked file, or of the FILEs given (paths relative to SOURCE_DIR), and finds
the words that look like one of collie's file names: a name ending in .h, .cc,
.cu, .cuh, .py, .sh, .cmake or .md, with or without folders. A name is fine
when a tracked file has that path (as a whole, or as its end: "transport/wire.h"),
when a tracked file has that base name (comments often name a file in the
same folder by name alone), when NAME.in is tracked (config.h is generated
from config.h.in), or when it is in EXTERNAL (other projects' files that
comments cite). A name right after "$", "<", ">", "{" or "*", or under a
folder written in capitals (an environment variable: "OUT_DIR/results.md"),
is a pattern, not a file: "$tmp/x.h", "<name>_fuzz.cc".
"""
import os
import re
import subprocess
import sys

# Other projects' files the comments cite, each with whose it is.
EXTERNAL = {
    "nccl.h": "NCCL",
    "cuda_runtime.h": "CUDA",
    "openssl/types.h": "OpenSSL",
    "TorchConfig.cmake": "torch's CMake package",
    "distributed_c10d.py": "torch.distributed",
    "run.py": "torch.distributed.run (torchrun)",
    "Lib/pickletools.py": "CPython",
    "lightning/pytorch/trainer/connectors/accelerator_connector.py": "Lightning",
    "accelerate/state.py": "Hugging Face Accelerate",
}

NAME_RE = re.compile(r"(?<![\w./$<>{*-])((?:[\w.-]+/)*[\w-]+\.(?:h|cc|cu|cuh|py|sh|cmake|md))(?![\w/])")
SCRIPT_EXT = (".py", ".sh", ".cmake")
CXX_EXT = (".h", ".cc", ".cu", ".cuh")


def tracked_files(source_dir):
    out = subprocess.run(["git", "-C", source_dir, "ls-files"], check=True, capture_output=True,
                         text=True).stdout
    return [f for f in out.split("\n") if f]


def comments(path, text):
    """(line number, comment text) of each line with a comment."""
    ext = os.path.splitext(path)[1]
    if ext in CXX_EXT:
        marker = "//"
    elif ext in SCRIPT_EXT or os.path.basename(path) == "CMakeLists.txt":
        marker = "#"
    else:
        return
    for lineno, line in enumerate(text.split("\n"), 1):
        if marker == "#" and line.lstrip().startswith(("#include", "#!")):
            continue
        at = line.find(marker)
        if at >= 0 and not line[at + len(marker):].startswith("include"):
            yield lineno, line[at + len(marker):]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    source_dir = sys.argv[1]
    tracked = tracked_files(source_dir)
    paths = set(tracked)
    names = {os.path.basename(f) for f in tracked}
    files = sys.argv[2:] or tracked

    def exists(name):
        if "/" in name and re.fullmatch(r"[A-Z][A-Z0-9_]*", name.split("/")[0]):
            return True
        for prefix in ("collie/", "../"):
            if name.startswith(prefix):
                name = name[len(prefix):]
        if name in EXTERNAL or name in paths or name + ".in" in paths:
            return True
        if "/" in name:
            return any(p.endswith("/" + name) or p.endswith("/" + name + ".in") for p in paths)
        return name in names or name + ".in" in names

    missing, checked = [], 0
    for f in files:
        full = os.path.join(source_dir, f)
        if not os.path.isfile(full):
            continue
        try:
            text = open(full, encoding="utf-8").read()
        except UnicodeDecodeError:
            continue
        checked += 1
        for lineno, comment in comments(f, text):
            for m in NAME_RE.finditer(comment):
                if not exists(m.group(1)):
                    missing.append(f"{f}:{lineno}: the comment names {m.group(1)}, which does not exist")
    for line in missing:
        print(line)
    if missing:
        print(f"check_comment_files: {len(missing)} comment(s) name files that do not exist "
              "(another project's file: add it to EXTERNAL in this script)")
        return 1
    print(f"check_comment_files: every file named in the comments of {checked} files exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
