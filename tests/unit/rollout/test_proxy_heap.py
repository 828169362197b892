"""A started proxy takes its startup heap out of the cyclic collector's view (bench/results/proxy.md: full
collections over it stopped the event loop for 100-200 ms, the p99 of every stream in flight)."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import gc, json, weakref
from openforgerl.rollout.proxy.server import settle_heap

class Node:
    pass

old = Node(); old.me = old; old_ref = weakref.ref(old); del old     # a cycle that was garbage before start
before = len(gc.get_objects())
settle_heap()
after = len(gc.get_objects())
new = Node(); new.me = new; new_ref = weakref.ref(new); del new     # a cycle made while serving
gc.collect()
print(json.dumps({"before": before, "after": after, "old_freed": old_ref() is None,
                  "new_freed": new_ref() is None, "young_threshold": gc.get_threshold()[0]}))
"""


def test_the_startup_heap_leaves_the_collector_and_later_garbage_is_still_collected() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["before"] > 20_000, seen  # uvicorn, aiohttp, the proxy: what a full collection used to walk
    assert seen["after"] < seen["before"] / 10, seen
    assert seen["old_freed"], "garbage from before the start was frozen instead of collected"
    assert seen["new_freed"], "a cycle made after the start was never collected"
    assert seen["young_threshold"] >= 10_000, seen
