#!/bin/bash
# Reward 1 when /app/hello.txt holds exactly "hi" (a trailing newline is fine).
content=$(cat /app/hello.txt 2>/dev/null)
if [ "$content" = "hi" ]; then reward=1; else reward=0; fi
exists=$([ -f /app/hello.txt ] && echo true || echo false)
printf '{"reward": %s, "file_exists": %s}\n' "$reward" "$exists" > /logs/verifier/reward.json
