"""The master's rooms include downward only (docs/design.md, "Source layout").

Reads every #include "master/<room>/..." in master/, monitoring/ and worker/ and fails on an
include the order below does not allow: a room may include the rooms below it, never one above
or beside it unless the order lists it. monitoring/ and worker/ include no room of the master.
The exceptions that still stand are listed by file: a new upward include fails, and so does
an exception that is no longer there.

Usage: master_rooms.py SOURCE_DIR
"""
import os
import re
import sys

# Each room and the rooms it may include.
BELOW = {
    "cli": {"run", "kinds", "hosts", "files", "unit", "log"},
    "run": {"kinds", "hosts", "files", "unit", "log"},
    "kinds": {"hosts", "files", "unit", "log"},
    "hosts": {"unit", "log"},
    "files": {"unit", "log"},
    "unit": {"log"},
    "log": set(),
    "monitoring": set(),
    "worker": set(),
}
# Upward includes that still stand: (file, room it includes).
STANDING = {
    ("master/run/segment_header.cc", "cli"),  # the workers' flags (FlagDef::to_workers)
    ("master/files/predict.h", "cli"),  # eval and predict take the command line's Command
    ("master/files/export.h", "cli"),  # export likewise
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"master/([a-z_]+)/')


def room_of(path):
    parts = path.split("/")
    return parts[1] if parts[0] == "master" else parts[0]


def main(src):
    bad, seen = [], set()
    for top in ("master", "monitoring", "worker"):
        for dirpath, _, files in os.walk(os.path.join(src, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), src)
                room = room_of(rel)
                with open(os.path.join(src, rel), encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or m.group(1) == room:
                            continue
                        if room not in BELOW:
                            bad.append(f"{rel}:{n}: a room the order does not know: {room}")
                        elif (rel, m.group(1)) in STANDING:
                            seen.add((rel, m.group(1)))
                        elif m.group(1) not in BELOW[room]:
                            bad.append(f"{rel}:{n}: {room} includes {m.group(1)}, above it")
    for rel, up in sorted(STANDING - seen):
        bad.append(f"{rel}: no longer includes {up}: remove it from STANDING")
    for b in bad:
        print(b)
    print(f"{len(bad)} upward includes" if bad else "the master's rooms include downward only")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
