#!/usr/bin/env bash
# Prints the commit a device run measures: PROVETOP_COMMIT when given, else git's HEAD with
# "+dirty" when the tracked files differ from it (the device machine's copy of the tree can
# carry git metadata older than its files: a bare HEAD would name a commit that did not run),
# else "unknown". The GPU scripts export its output as PROVETOP_COMMIT.
if [ -n "${PROVETOP_COMMIT:-}" ]; then
    echo "$PROVETOP_COMMIT"
    exit 0
fi
head=$(git rev-parse --short HEAD 2>/dev/null) || { echo unknown; exit 0; }
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    echo "$head+dirty"
else
    echo "$head"
fi
