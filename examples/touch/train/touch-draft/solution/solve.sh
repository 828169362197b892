#!/bin/bash
echo done > /app/draft.txt
