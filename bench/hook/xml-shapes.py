#!/usr/bin/env python3
"""Benchmark: how the hook's reading of a domain XML grows with its shape (issue 14, item 3).

Usage: bench/hook/xml-shapes.py HOOK [ROUNDS [LIMIT_SECONDS]]

Runs HOOK (an mdev-manager-hook binary) as libvirt does, `shaped prepare begin -` with the
XML on stdin and no D-Bus service (every document here holds only a USB <hostdev>, which is
never the service's, so the hook parses and exits without a call), and prints the median wall
time of ROUNDS runs (default 5) for:

* the hostile shapes the issue measured: nesting 10k-200k deep, 20k-300k attributes on one
  <hostdev>, and 20k-300k namespace declarations. Before the shape bounds these were
  quadratic (seconds to minutes); with them the hook refuses each at once (exit 1);
* the worst shapes the bounds allow, at N and 2N copies: blocks nested to the depth bound,
  hostdevs with the attribute bound's count, namespaces at the bound with many elements in
  their scope. Reading is linear when the 2N/N ratio is about 2.

A run longer than LIMIT_SECONDS (default 60) is stopped and shown as "> LIMIT" (a hook built
before the bounds takes minutes on the largest inputs). Times include the process start
(about 1 ms). No assertion: the numbers are for
docs/benchmarks.md; tests check the behaviour (libvirt-hooks/tests/xml_bounds.rs).
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

MAX_DEPTH = 256
MAX_ATTRIBUTES = 256
MAX_NAMESPACES = 64
UUID = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"


def domain(metadata="", devices="<hostdev mode='subsystem' type='usb'/>"):
    return (
        f"<domain type='kvm'><name>shaped</name><uuid>{UUID}</uuid>"
        f"<metadata>{metadata}</metadata><devices>{devices}</devices></domain>"
    ).encode()


def nested(levels):
    return "<x>" * levels + "</x>" * levels


def hostdev_with(attributes):
    extra = "".join(f" a{i}=''" for i in range(attributes))
    return f"<hostdev mode='subsystem' type='usb'{extra}/>"


def namespaced(declarations):
    return "".join(f"<p{i}:m xmlns:p{i}='urn:{i}'>" for i in range(declarations))


def hostile():
    for depth in (10_000, 50_000, 100_000, 200_000):
        yield f"nesting {depth} deep", domain(nested(depth))
    for count in (20_000, 50_000, 300_000):
        yield f"{count} attributes on one <hostdev>", domain(devices=hostdev_with(count))
    for count in (20_000, 300_000):
        decls = "".join(f" xmlns:p{i}='urn:{i}'" for i in range(count))
        yield f"{count} namespace declarations on one element", domain(f"<m{decls}/>")


def allowed(copies):
    """The worst shapes inside the bounds, `copies` times."""
    # <domain><metadata> are 2 levels.
    yield "blocks nested to the depth bound", domain(nested(MAX_DEPTH - 2) * copies)
    yield "hostdevs at the attribute bound", domain(
        devices=hostdev_with(MAX_ATTRIBUTES - 2) * copies
    )
    # All declarations in scope, then unprefixed elements, each looked up through all of them.
    scope = namespaced(MAX_NAMESPACES)
    closing = "".join(f"</p{i}:m>" for i in reversed(range(MAX_NAMESPACES)))
    yield "elements under the namespace bound", domain(scope + "<e/>" * (400 * copies) + closing)


def run(hook, xml, rounds, root, limit):
    with tempfile.TemporaryFile() as stdin:
        stdin.write(xml)
        times = []
        code = None
        for _ in range(rounds):
            stdin.seek(0)
            start = time.perf_counter()
            try:
                result = subprocess.run(
                    [hook, "shaped", "prepare", "begin", "-"],
                    stdin=stdin,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    env={
                        "DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={root}/no-bus",
                        "MDEV_MANAGER_ROOT": root,
                    },
                    timeout=limit,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                return None, None, f"stopped after {limit} s"
            times.append(time.perf_counter() - start)
            code = result.returncode
            line = result.stderr.decode(errors="replace").strip()
        return statistics.median(times), code, line


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    hook = os.path.realpath(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    limit = float(sys.argv[3]) if len(sys.argv) > 3 else 60.0
    root = tempfile.mkdtemp(prefix="xml-shapes-")
    print(f"hook {hook}; median of {rounds} runs; load {os.getloadavg()[0]:.2f}")
    print("\nhostile shapes (the issue's inputs)")
    for name, xml in hostile():
        seconds, code, line = run(hook, xml, rounds, root, limit)
        shown = f"{seconds * 1000:9.1f} ms" if seconds is not None else f"> {limit:.0f} s".rjust(12)
        print(f"  {name:48} {len(xml):>9} B  exit {code}  {shown}  {line[:100]}")
    print("\nworst shapes inside the bounds, N and 2N copies")
    copies = 1_000
    small = dict(allowed(copies))
    large = dict(allowed(2 * copies))
    for name in small:
        t1, c1, _ = run(hook, small[name], rounds, root, limit)
        t2, c2, _ = run(hook, large[name], rounds, root, limit)
        if t1 is None or t2 is None:
            print(f"  {name:40} stopped after {limit} s")
            continue
        print(
            f"  {name:40} N: {len(small[name]):>8} B {t1 * 1000:7.1f} ms (exit {c1})"
            f"  2N: {len(large[name]):>8} B {t2 * 1000:7.1f} ms (exit {c2})  ratio {t2 / t1:.2f}"
        )


if __name__ == "__main__":
    main()
