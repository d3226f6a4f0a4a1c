"""What one ledger transition costs on the embedded database as `pipeline_runs` grows.

Times the ledger's conditional write on a run among N others, as `find_one_and_update`
and as `update_one` (plus a read by `_id`), with and without an index covering every
field of the filter (the embedded server uses an index only then). Prints a table.

    .venv/bin/python bench/ledger_cost.py --runs 20000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from pymongo import ASCENDING, ReturnDocument

from svc.core import Store
from svc.subprocesses import EmbeddedMongo

FILTER_FIELDS = ("_id", "status", "incarnation")


async def timed(make, repeat: int) -> float:  # type: ignore[no-untyped-def]
    """The median milliseconds of `repeat` calls of `make()`."""
    samples = []
    for n in range(repeat):
        started = time.perf_counter()
        await make(n)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedMongo(Path(tmp))
        store = Store.connect(await server.start())
        try:
            runs = store["pipeline_runs"]
            docs = [
                {"_id": f"r{n}", "installId": f"i{n % 50}", "status": "completed", "incarnation": "x"}
                for n in range(args.runs)
            ]
            for start in range(0, len(docs), 2000):
                await runs.insert_many(docs[start : start + 2000])
            await runs.insert_many(
                [{"_id": f"t{n}", "status": "running", "incarnation": "inc"} for n in range(args.repeat * 8)]
            )
            lines = [f"pipeline_runs: {args.runs + args.repeat * 8} documents; median ms of {args.repeat}"]
            for indexed in (False, True):
                if indexed:
                    await runs.create_index([(f, ASCENDING) for f in FILTER_FIELDS])
                    await runs.create_index([("_id", ASCENDING), ("status", ASCENDING)])
                base = 0 if not indexed else args.repeat * 4
                tag = "covering index" if indexed else "no covering index"

                async def fam(n: int, base: int = base) -> None:
                    await runs.find_one_and_update(
                        {"_id": f"t{base + n}", "status": "running", "incarnation": "inc"},
                        {"$set": {"status": "completed"}},
                        return_document=ReturnDocument.AFTER,
                    )

                async def upd(n: int, base: int = base) -> None:
                    await runs.update_one(
                        {"_id": f"t{base + args.repeat + n}", "status": "running", "incarnation": "inc"},
                        {"$set": {"status": "completed"}},
                    )

                async def upd_read(n: int, base: int = base) -> None:
                    run_id = f"t{base + 2 * args.repeat + n}"
                    await runs.update_one(
                        {"_id": run_id, "status": "running", "incarnation": "inc"},
                        {"$set": {"status": "completed"}},
                    )
                    await runs.find_one({"_id": run_id})

                async def fam_id(n: int, base: int = base) -> None:
                    await runs.find_one_and_update(
                        {"_id": f"t{base + 3 * args.repeat + n}"}, {"$set": {"status": "completed"}}
                    )

                cases = (
                    ("find_one_and_update {_id,status,incarnation}", fam),
                    ("update_one {_id,status,incarnation}", upd),
                    ("update_one + find_one {_id}", upd_read),
                    ("find_one_and_update {_id}", fam_id),
                )
                for name, case in cases:
                    lines.append(f"  {name + ', ' + tag:<66}{await timed(case, args.repeat):8.2f}")
            print("\n".join(lines))
        finally:
            await store.close()
            await server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=10)
    asyncio.run(main(parser.parse_args()))
