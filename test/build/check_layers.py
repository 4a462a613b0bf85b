#!/usr/bin/env python3
"""The layering test: every #include "collie/x/y.h" of a file that belongs to a
layer must name a header of that layer or of a layer below it; and every file
of the tree includes collie's headers as "collie/<folder>/..." (the path they
are installed under), never by their path in the source tree.

The layers and their dependencies are read from cmake/CollieLayers.cmake (the
one place they are written down). A file belongs to the layer whose folder is
the longest prefix of its path; files in no layer (samples/, bench/, test/,
tools/) are not checked for direction. "Below" is the transitive closure of
DEPS.

  check_layers.py SOURCE_DIR [FILE...]   exit 0 when clean, 1 listing violations

With FILE arguments only those files are checked (paths relative to
SOURCE_DIR); the ctest case checks every tracked .h/.cc/.cu file.
"""
import os
import re
import subprocess
import sys

LAYER_RE = re.compile(
    r"^\s*collie_layer\(\s*(\w+)\s+(\S+)((?:\s+DEPS(?:\s+(?!IF\b)\w+)+)?)(?:\s+IF\s+\w+)?\s*\)",
    re.M)
# Top-level folders that are no layer but hold headers the tree includes.
NON_LAYER_FOLDERS = ("samples", "bench", "test", "tools")
# Projects in the tree that stand for collie's users (built against an
# installed collie): their own headers are theirs.
OUTSIDE_PROJECTS = ("test/build/consumer/",)
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_layers(source_dir):
    text = open(os.path.join(source_dir, "cmake", "CollieLayers.cmake")).read()
    layers = {}
    for name, folder, deps in LAYER_RE.findall(text):
        layers[name] = (folder.rstrip("/"), deps.split()[1:] if deps else [])
    if not layers:
        sys.exit("check_layers: no collie_layer() lines in cmake/CollieLayers.cmake")
    for name, (_, deps) in layers.items():
        for d in deps:
            if d not in layers:
                sys.exit(f"check_layers: layer {name} depends on unknown layer {d}")
    return layers


def closure(layers):
    below = {}

    def visit(name, stack):
        if name in below:
            return below[name]
        if name in stack:
            sys.exit("check_layers: dependency cycle: " + " -> ".join(stack + [name]))
        result = {name}
        for d in layers[name][1]:
            result |= visit(d, stack + [name])
        below[name] = result
        return result

    for name in layers:
        visit(name, [])
    return below


def layer_of(path, layers):
    best, best_len = None, -1
    for name, (folder, _) in layers.items():
        if (path == folder or path.startswith(folder + "/")) and len(folder) > best_len:
            best, best_len = name, len(folder)
    return best


def tracked_files(source_dir):
    out = subprocess.run(["git", "-C", source_dir, "ls-files", "*.h", "*.cc", "*.cu", "*.cuh"],
                         check=True, capture_output=True, text=True).stdout
    return [f for f in out.split("\n") if f]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    source_dir = sys.argv[1]
    layers = read_layers(source_dir)
    allowed = closure(layers)
    files = sys.argv[2:] or tracked_files(source_dir)
    top = {folder.split("/")[0] for folder, _ in layers.values()} | set(NON_LAYER_FOLDERS)
    violations, checked = [], 0
    for f in files:
        if f.startswith(OUTSIDE_PROJECTS):
            continue
        own = layer_of(f, layers)
        checked += own is not None
        text = open(os.path.join(source_dir, f), errors="replace").read()
        for lineno, line in enumerate(text.split("\n"), 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            path = m.group(1)
            if path.split("/")[0] in top:
                violations.append(f"{f}:{lineno}: includes \"{path}\" by its place in the source "
                                  f"tree; collie's headers are included as \"collie/{path}\"")
                continue
            if not path.startswith("collie/") or own is None:
                continue
            target = layer_of(path[len("collie/"):], layers)
            if target is not None and target not in allowed[own]:
                violations.append(f"{f}:{lineno}: layer '{own}' includes \"{path}\" of layer "
                                  f"'{target}', which is not below it (allowed: "
                                  f"{', '.join(sorted(allowed[own]))})")
    for v in violations:
        print(v)
    if violations:
        print(f"check_layers: {len(violations)} bad include(s); the layer order is "
              "cmake/CollieLayers.cmake")
        return 1
    print(f"check_layers: {checked} files in {len(layers)} layers include only downwards, "
          f"and all {len(files)} files include collie/...")
    return 0


if __name__ == "__main__":
    sys.exit(main())
