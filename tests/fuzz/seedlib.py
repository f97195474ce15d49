"""Shared by the seed_*.py scripts: byte-level mutations of valid inputs, and writing a seed
folder."""
import os


def mutate(files, rng, count, max_edits, max_del, max_dup):
    """Appends count mutants of random members of files: each flips, deletes (up to max_del
    bytes) or duplicates (up to max_dup bytes) a byte range, 1..max_edits times."""
    for _ in range(count):
        base = bytearray(rng.choice(files))
        for _ in range(rng.randint(1, max_edits)):
            if not base:
                break
            p = rng.randrange(len(base))
            k = rng.choice((0, 1, 2))
            if k == 0:
                base[p] = rng.randrange(256)
            elif k == 1:
                del base[p:p + rng.randint(1, max_del)]
            else:
                base[p:p] = base[p:p + rng.randint(1, max_dup)]
        files.append(bytes(base))


def write_seeds(out, files):
    """Writes files as out/seed_NNNN and says how many."""
    os.makedirs(out, exist_ok=True)
    for i, data in enumerate(files):
        with open(os.path.join(out, f"seed_{i:04d}"), "wb") as f:
            f.write(data)
    print(f"wrote {len(files)} seeds to {out}")
