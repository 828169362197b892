#!/bin/bash
echo done > /app/agenda.txt
