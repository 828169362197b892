#!/bin/bash
# Reward 1 when /app/notes.txt exists (any content), else 0.
if [ -f /app/notes.txt ]; then reward=1; else reward=0; fi
printf '{"reward": %s}\n' "$reward" > /logs/verifier/reward.json
