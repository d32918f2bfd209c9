#!/usr/bin/env python3
"""Which of a running process's own code is resident, and how much of it is still in use.

    scripts/resident-code.py PID [SECONDS]

Prints, for each mapping of the process's executable, the resident pages (from
/proc/PID/pagemap), then those pages attributed to the crates whose functions lie in them (a
page shared by several functions is split between them), then how much of each mapping was
referenced within SECONDS (default 30; /proc/PID/clear_refs, then smaps' `Referenced:`).
Pages of a file are mapped with their cached neighbours on each fault (fault-around), so what
is resident is more than what ran. Needs root (pagemap's frame bits, clear_refs).
"""
import bisect
import collections
import os
import re
import struct
import subprocess
import sys
import time

PAGE = 4096


def mappings(pid, exe):
    for line in open(f"/proc/{pid}/maps"):
        parts = line.split()
        if len(parts) >= 6 and os.path.realpath(parts[5]) == exe:
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            yield lo, hi, parts[1], int(parts[2], 16)


def segments(exe):
    """(file offset, virtual address, file size) of each loadable segment."""
    out = subprocess.run(["readelf", "-lW", exe], capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        fields = line.split()
        if fields and fields[0] == "LOAD":
            yield int(fields[1], 16), int(fields[2], 16), int(fields[4], 16)


def functions(exe):
    out = subprocess.run(["nm", "-n", "--defined-only", "-C", exe],
                         capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        m = re.match(r"([0-9a-f]+) [tTwW] (.*)", line)
        if m:
            yield int(m.group(1), 16), m.group(2)


def crate(name):
    name = re.sub(r"^<+(impl |dyn |&mut |&)?", "", name)
    m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)::", name)
    return m.group(1) if m else "(C, or a symbol without a path)"


def referenced(pid, exe):
    found, current = {}, None
    for line in open(f"/proc/{pid}/smaps"):
        fields = line.split()
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            current = (fields[0], fields[1]) if len(fields) >= 6 and fields[5] == exe else None
        elif current and fields[0] in ("Rss:", "Referenced:"):
            found.setdefault(current, {})[fields[0]] = int(fields[1])
    return found


def main():
    pid = int(sys.argv[1])
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 30
    exe = os.path.realpath(f"/proc/{pid}/exe")
    segs = list(segments(exe))
    syms = list(functions(exe))
    addrs = [a for a, _ in syms]
    by_crate = collections.Counter()
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for lo, hi, perm, offset in mappings(pid, exe):
            present = 0
            for page in range((hi - lo) // PAGE):
                pagemap.seek((lo // PAGE + page) * 8)
                (entry,) = struct.unpack("<Q", pagemap.read(8))
                if not entry >> 63:
                    continue
                present += 1
                if "x" not in perm:
                    continue
                at = offset + page * PAGE
                vaddr = next((va + at - off for off, va, size in segs if off <= at < off + size),
                             None)
                if vaddr is None:
                    continue
                first = max(bisect.bisect_right(addrs, vaddr) - 1, 0)
                names = [syms[k][1] for k in range(first, bisect.bisect_left(addrs, vaddr + PAGE))]
                for name in names:
                    by_crate[crate(name)] += 1 / len(names)
            print(f"{lo:x} {perm} {present * PAGE / 2**20:8.2f} MiB resident")
    print("resident code by crate (MiB):")
    for name, pages in by_crate.most_common(25):
        print(f"{pages * PAGE / 2**20:8.2f} {name}")
    with open(f"/proc/{pid}/clear_refs", "w") as clear:
        clear.write("1")
    time.sleep(seconds)
    print(f"referenced within {seconds:g} s:")
    for (span, perm), kb in referenced(pid, exe).items():
        print(f"{span} {perm} {kb.get('Referenced:', 0) / 1024:8.2f} of {kb['Rss:'] / 1024:.2f} MiB")


if __name__ == "__main__":
    main()
