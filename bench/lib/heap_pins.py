#!/usr/bin/env python3
"""What keeps a running strowger's glibc heaps resident: for each thread arena's heap, its size, the bytes
of chunks in use, the pages resident (/proc/PID/pagemap), the resident pages that hold no chunk in use
(a `malloc_trim` gives those back), and the chunks in use on sparse pages (resident, under a quarter of the
page in use): the chunks that pin pages the allocator otherwise has free, by size, with a sample of each
size's bytes (a SIP message, a transaction key, an SDP body tells what allocated it).

    python3 bench/lib/heap_pins.py PID [--sizes 12]

Read-only, as root (or the process's owner with ptrace rights): the pages come from /proc/PID/mem, and only
the resident ones are read, since reading a page that is not would map it (the zero page) and the next look
would count it resident. glibc x86-64 layout: a thread heap is 64 MiB-aligned, starts with its heap_info,
and the first heap of an arena holds the arena's malloc_state (its top chunk at offset 96) after it. The
process runs on while it is read, so a chunk or two may be torn; the counts are a snapshot, not exact.
Chunks in glibc's per-thread caches and fast bins count as in use (their size fields say so).
"""

import argparse
import collections
import re
import struct

HEAP_MAX = 64 << 20
PAGE = 4096
TOP_OFFSET = 96  # malloc_state.top on x86-64: mutex, flags, have_fastchunks, then 10 fast bins
HEAP_INFO = (32, 48)  # sizeof(heap_info) before and after glibc 2.35 added its page size field


def resident(pm, lo, pages):
    pm.seek(lo // PAGE * 8)
    raw = pm.read(pages * 8)
    return [struct.unpack_from("<Q", raw, i * 8)[0] >> 63 for i in range(pages)]


def read_resident(mem, lo, res):
    """The heap's bytes, zeros where a page is not resident (reading it would map it)."""
    data = bytearray(len(res) * PAGE)
    i = 0
    while i < len(res):
        if not res[i]:
            i += 1
            continue
        j = i
        while j < len(res) and res[j]:
            j += 1
        mem.seek(lo + i * PAGE)
        data[i * PAGE:j * PAGE] = mem.read((j - i) * PAGE)
        i = j
    return data


def walk(data, lo, start, end):
    """(address, size) of every chunk from `start` up to `end`, or None if the size fields do not lead there."""
    chunks, p = [], start
    while p < end:
        size = struct.unpack_from("<Q", data, p - lo + 8)[0] & ~7
        if size < 32 or p + size > lo + len(data):
            return None
        chunks.append((p, size))
        p += size
    return chunks if p == end else None


def heap_report(mem, pm, lo, hi, sizes):
    res = resident(pm, lo, (hi - lo) // PAGE)
    data = read_resident(mem, lo, res)
    arena = struct.unpack_from("<Q", data, 0)[0]
    if arena - lo not in HEAP_INFO:
        return f"heap {lo:x}: a continuation heap of an arena (not walked)"
    top = struct.unpack_from("<Q", data, arena - lo + TOP_OFFSET)[0]
    if not lo <= top < hi:
        return f"heap {lo:x}: top chunk {top:x} outside the heap (not walked)"
    chunks = None
    for off in range(arena - lo + 16, 4096, 16):
        chunks = walk(data, lo, lo + off, top)
        if chunks:
            break
    if not chunks:
        return f"heap {lo:x}: no chunk chain reaches the top chunk (not walked)"
    inuse = []
    for i, (p, size) in enumerate(chunks):
        after = chunks[i + 1][0] if i + 1 < len(chunks) else top
        if struct.unpack_from("<Q", data, after - lo + 8)[0] & 1:
            inuse.append((p, size))
    on_page = collections.defaultdict(int)
    holders = collections.defaultdict(list)
    for p, size in inuse:
        first, last = (p + 16 - lo) // PAGE, (p + size - 1 - lo) // PAGE
        for pg in range(first, last + 1):
            page_lo = lo + pg * PAGE
            on_page[pg] += min(p + size, page_lo + PAGE) - max(p, page_lo)
            holders[pg].append((p, size))
    rpages = sum(res)
    free_res = sum(1 for pg, r in enumerate(res) if r and pg not in on_page)
    sparse = [pg for pg, r in enumerate(res) if r and 0 < on_page.get(pg, 0) < PAGE // 4]
    by_size, sample = collections.Counter(), {}
    for pg in sparse:
        for p, size in holders[pg]:
            by_size[size] += 1
            if size not in sample:
                raw = bytes(data[p - lo + 16:p - lo + 16 + 56])
                sample[size] = re.sub(rb"[^ -~]", b".", raw).decode()
    lines = [f"heap {lo:x}: {(hi - lo) >> 10} KiB, top chunk at {(top - lo) >> 10} KiB; {len(inuse)} chunks in use, "
             f"{sum(s for _, s in inuse) >> 10} KiB; resident {rpages * 4} KiB, of which {free_res * 4} KiB hold no "
             f"chunk in use and {len(sparse) * 4} KiB are sparse (under 1 KiB in use)"]
    if sparse:
        lines.append("  chunks on sparse pages, by size: " +
                     ", ".join(f"{s} B ×{n}" for s, n in by_size.most_common(sizes)))
        lines += [f"    {s:>6} B: {sample[s]}" for s, _ in by_size.most_common(sizes)]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("pid", type=int)
    ap.add_argument("--sizes", type=int, default=12, help="chunk sizes listed per heap (12)")
    args = ap.parse_args()
    heaps = []
    with open(f"/proc/{args.pid}/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if parts[1].startswith("rw") and len(parts) == 5 and lo % HEAP_MAX == 0 and hi - lo <= HEAP_MAX:
                heaps.append((lo, hi))
    with open(f"/proc/{args.pid}/mem", "rb") as mem, open(f"/proc/{args.pid}/pagemap", "rb") as pm:
        for lo, hi in heaps:
            print(heap_report(mem, pm, lo, hi, args.sizes))


if __name__ == "__main__":
    main()
