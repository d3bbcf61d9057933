#!/usr/bin/env python3
"""The floors of the code (docs/design.md, "Layers"): which folder may include which.

Each top-level folder of the library and the programs sits on a floor, and includes only
folders on the floors below it; inside master/ the rooms are ordered the same way. Prints
every #include that points up or sideways (file:line, the folder it comes from and the one it
reaches), every data:: type named in a public header, and a cycle in the table itself, and
exits 1 if there is one. tests/, bench/ and fuzz/ may include anything.

Usage: layering.py SOURCE_DIR
"""
import os
import re
import sys

# Bottom to top. A folder may include the folders listed before it on its own line of
# ALLOWED, and itself.
ALLOWED = {
    "include": set(),  # the public headers: shmtrain/*.h
    "core": {"include"},
    "shm": {"include", "core"},
    "nn": {"include", "core"},
    "data": {"include", "core", "shm", "nn"},
    "monitoring": {"include", "core", "shm", "nn"},
    "worker": {"include", "core", "nn", "data", "shm"},
    "master": {"include", "core", "nn", "data", "shm", "monitoring"},
}

# master/'s rooms, bottom to top: a room includes only rooms before it in this list.
MASTER_ROOMS = ["log", "unit", "flags", "files", "hosts", "kinds", "plan", "run", "launch", "cli"]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of_include(path, including_folder):
    """The top-level folder an #include "path" reaches, or None for one in the same folder."""
    if path.startswith("shmtrain/"):
        return "include" if including_folder != "include" else None
    head = path.split("/", 1)[0]
    if "/" not in path or head not in ALLOWED:
        return None  # a sibling header ("x.h") or a generated one
    return head if head != including_folder else None


def violations(source_dir):
    for folder in ALLOWED:
        root = os.path.join(source_dir, folder)
        for dirpath, _, names in os.walk(root):
            for name in sorted(names):
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, source_dir)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        why = check(rel, folder, m.group(1))
                        if why:
                            yield f"{rel}:{number}: {why}"


def check(rel, folder, included):
    """Why `rel` (in `folder`) may not include `included`, or None."""
    target = folder_of_include(included, folder)
    if target is not None and target not in ALLOWED[folder]:
        return f'{folder}/ includes {target}/ ("{included}"), a floor up or beside'
    if folder == "master" and included.startswith("master/"):
        room, other = rel.split("/")[1], included.split("/")[1]
        if room != other and (room not in MASTER_ROOMS or other not in MASTER_ROOMS):
            return f'master/{room}/ or master/{other}/ has no place in the rooms\' order'
        if room != other and MASTER_ROOMS.index(other) > MASTER_ROOMS.index(room):
            return f'master/{room}/ includes master/{other}/ ("{included}"), a room up'
    return None


def public_data_types(source_dir):
    """Public headers speak the public vocabulary: no data:: type outside a comment."""
    root = os.path.join(source_dir, "include", "shmtrain")
    for name in sorted(os.listdir(root)):
        with open(os.path.join(root, name), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if "data::" in line.split("//", 1)[0]:
                    yield f"include/shmtrain/{name}:{number}: a public header names data::"


def table_cycles():
    """The floors' table itself: a cycle in ALLOWED would let two folders include each other."""
    done, found = set(), []

    def visit(folder, path):
        if folder in path:
            found.append("ALLOWED has a cycle: " + " -> ".join(path + [folder]))
        elif folder not in done:
            for below in sorted(ALLOWED[folder]):
                visit(below, path + [folder])
            done.add(folder)

    for folder in ALLOWED:
        visit(folder, [])
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: layering.py SOURCE_DIR")
    found = table_cycles() + list(violations(sys.argv[1]))
    found += list(public_data_types(sys.argv[1]))
    for v in found:
        print(v)
    print(f"layering: {len(found)} include(s) against the floors")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
