#!/bin/sh
out="$WORKSPACE/env-$RANK.txt"
env | sort > "$out"
echo "ARGS=$*" >> "$out"
echo "PWD=$(pwd)" >> "$out"
cat "$DATASETS_PATH/ds/sub/a.txt" >> "$out"
if echo x > "$DATASETS_PATH/ds/new" 2>>"$out"; then echo "DATASET_WRITABLE" >> "$out"; else echo "DATASET_RO" >> "$out"; fi
ls /tmp/e2e/d/volumes 2>&1 | head -2 >> "$out"
ps -e | wc -l >> "$out"
exit 0
