#!/usr/bin/env python3
"""Prints the daemon's durable state as it would load it: state.json with state.journal
replayed onto it (the journal format of mdev-engine/src/journal.rs).

The daemon (config `state_journal`, on by default) appends each change to state.journal and
folds it into state.json only now and then, so a check that reads state.json alone misses
recent changes. Replay follows the daemon's own rules: only a journal whose header
generation equals the state file's `journal_generation` (absent = 0) applies; a last line
without its newline is a torn append and is dropped; map entries set a record or remove it
(null); set members are added (true) or removed (false).

    state_view.py STATE_DIR        prints the state as one JSON object
"""
import json
import os
import sys

MAPS = ("instances", "parents", "passthrough", "intents")
SETS = ("pending_creates", "pending_destroys")


def load(state_dir):
    try:
        with open(os.path.join(state_dir, "state.json")) as f:
            state = json.load(f)
    except FileNotFoundError:
        state = {}
    try:
        with open(os.path.join(state_dir, "state.journal")) as f:
            text = f.read()
    except FileNotFoundError:
        return state
    lines = text.split("\n")
    # The part after the last newline is a torn append (or empty).
    complete = lines[:-1]
    if not complete:
        return state
    header = json.loads(complete[0])
    if header.get("generation") != state.get("journal_generation", 0):
        return state
    for line in complete[1:]:
        entry = json.loads(line)
        for key in MAPS:
            target = state.setdefault(key, {})
            for name, record in entry.get(key, {}).items():
                if record is None:
                    target.pop(name, None)
                else:
                    target[name] = record
        for key in SETS:
            members = set(state.get(key, []))
            for name, present in entry.get(key, {}).items():
                if present:
                    members.add(name)
                else:
                    members.discard(name)
            state[key] = sorted(members)
    return state


if __name__ == "__main__":
    json.dump(load(sys.argv[1]), sys.stdout)
    print()
