#!/bin/bash
# Reward 1 when /app/report.txt exists (any content), else 0.
if [ -f /app/report.txt ]; then reward=1; else reward=0; fi
printf '{"reward": %s}\n' "$reward" > /logs/verifier/reward.json
