#!/bin/bash
printf 'hi\n' > /app/hello.txt
