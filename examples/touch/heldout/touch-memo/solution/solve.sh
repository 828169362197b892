#!/bin/bash
echo done > /app/memo.txt
