#!/bin/bash
echo done > /app/ideas.txt
