#!/bin/bash
echo done > /app/report.txt
