#!/usr/bin/env python3
"""Interleaved wall-time benchmark of short-lived commands.

Each round runs every command once, in a shuffled order, so load changes on a shared machine
hit all commands alike (hyperfine runs all iterations of one command before the next). Every
process is started with posix_spawn and its stdin comes from the given file, as libvirt gives
the hook the domain XML on a pipe.

Usage: interleave.py RUNS NAME=STDIN_FILE::COMMAND [ARGS...] ...
Prints, per command, the median, 10th percentile and minimum in microseconds, and the ratio of
each median to the first command's.
"""

import os
import random
import statistics
import sys
import time


def main() -> None:
    runs = int(sys.argv[1])
    commands = []
    for spec in sys.argv[2:]:
        name, rest = spec.split("=", 1)
        stdin_file, command = rest.split("::", 1)
        commands.append((name, stdin_file, command.split()))
    samples = {name: [] for name, _, _ in commands}
    order = list(range(len(commands)))
    env = {"PATH": "/usr/bin:/bin"}
    for _ in range(runs):
        random.shuffle(order)
        for index in order:
            name, stdin_file, argv = commands[index]
            fd = os.open(stdin_file, os.O_RDONLY)
            start = time.perf_counter_ns()
            pid = os.posix_spawn(argv[0], argv, env, file_actions=[(os.POSIX_SPAWN_DUP2, fd, 0)])
            _, status = os.waitpid(pid, 0)
            elapsed = time.perf_counter_ns() - start
            os.close(fd)
            if os.waitstatus_to_exitcode(status) != 0:
                sys.exit(f"{name}: {' '.join(argv)} exited with {status}")
            samples[name].append(elapsed / 1000)
    base = statistics.median(samples[commands[0][0]])
    for name, _, _ in commands:
        values = sorted(samples[name])
        median = statistics.median(values)
        p10 = values[len(values) // 10]
        print(f"  {name:<44} median {median:8.1f} us  p10 {p10:8.1f} us  min {values[0]:8.1f} us"
              f"  ratio {median / base:.2f}")


if __name__ == "__main__":
    main()
