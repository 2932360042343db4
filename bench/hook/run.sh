#!/usr/bin/env bash
# Benchmark: wall time of the libvirt hook on a domain without vGPUs, against /bin/true in the
# same run (target: at most 1.5x). libvirt runs the hook synchronously on every operation of
# every domain, so this is what every VM start/stop on the host pays.
#
# Usage: bench/hook/run.sh [RUNS]     (HOOK=/path/to/mdev-manager-hook skips the build)
#        STATIC=1 bench/hook/run.sh   also builds and measures a statically linked hook
#        (`-C target-feature=+crt-static`, built with --target so build scripts stay dynamic),
#        for comparison only: the shipped hook stays dynamic and loads libc.so.6 alone
#        (docs/benchmarks.md, "Process start of the hook and vgpuctl", says why).
#        (STATIC_HOOK=/path/to/static/hook skips that build.)
#
# interleave.py alternates the commands round by round (so load on a shared machine hits them
# alike) and feeds each the same stdin file, as libvirt pipes the domain XML to the hook.
# Without python3 it falls back to hyperfine (commands run one after the other).
set -euo pipefail
cd "$(dirname "$0")/../.."

runs=${1:-3000}
hook=${HOOK:-}
if [ -z "$hook" ]; then
  cargo build --release -q -p libvirt-hooks --bin mdev-manager-hook
  hook=target/release/mdev-manager-hook
fi
hook=$(realpath "$hook")
static_hook=${STATIC_HOOK:-}
if [ -z "$static_hook" ] && [ "${STATIC:-0}" = 1 ]; then
  triple=$(rustc -vV | sed -n 's/^host: //p')
  RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR=target/hook-static \
    cargo build --release -q --target "$triple" -p libvirt-hooks --bin mdev-manager-hook
  static_hook=$(realpath "target/hook-static/$triple/release/mdev-manager-hook")
fi
plain=$(realpath libvirt-hooks/tests/fixtures/domains/plain.xml)
nic=$(realpath libvirt-hooks/tests/fixtures/domains/nic-passthrough.xml)

echo "libvirt hook, domain without vGPUs: $runs rounds; $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
if command -v python3 >/dev/null; then
  python3 bench/hook/interleave.py "$runs" \
    "/bin/true=$plain::/bin/true" \
    "hook start begin (exits unread)=$plain::$hook vm start begin -" \
    "hook prepare begin, plain.xml (byte scan)=$plain::$hook vm prepare begin -" \
    "hook release end, plain.xml (byte scan)=$plain::$hook vm release end destroyed" \
    "hook prepare begin, managed NIC (full parse)=$nic::$hook vm prepare begin -" \
    ${static_hook:+"static hook start begin=$plain::$static_hook vm start begin -"} \
    ${static_hook:+"static hook prepare begin, plain.xml=$plain::$static_hook vm prepare begin -"}
else
  hyperfine -N --warmup 200 --runs "$runs" /bin/true "$hook vm start begin -" "$hook vm prepare begin -"
fi
echo "target: ratio <= 1.5 (median against /bin/true)"
